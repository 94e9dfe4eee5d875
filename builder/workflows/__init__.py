"""The workflows: one verb's orchestration each, between the CLI (which parses and prints) and the rooms that do the
work. build (a context from a plan or a directory, built, verified, filed as an attempt; build_record: the attempt's
directory and matrix row), run (a workload run in an image, a SIF or here; run_result: its final result.json and
attempt; run_identity: an image's claims against the host's checks) and slurm_collect (a Slurm job's tasks finished
and recorded). Only here do the engine's outcomes meet the store. It may import engine, report, attest, store, plan
and the neutral modules; only `builder.cli` imports it. No Click here."""
