"""The workflows: one verb's orchestration each, between the CLI (which parses and prints) and the rooms that do the
work. build (a context from a plan or a directory, built, verified, filed as an attempt; build_record: the attempt's
directory, its build-record.json and matrix row; publish_build, verify_build, import_builds: a build record sent
home, checked at the door with its cell recomputed, imported), run (a workload run in an image, a SIF or here;
run_result: its final result.json and attempt; run_identity: an image's claims against the host's checks;
local_routes: which Python a run here takes) and slurm_collect (a Slurm job's tasks finished and recorded). Only here
do the engine's outcomes meet the store. It may import engine, report, attest, store, plan and the neutral modules;
only `builder.cli` imports it. No Click here."""
