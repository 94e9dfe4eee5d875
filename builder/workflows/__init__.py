"""The workflows: one function per verb, between the CLI (which maps flags to a typed request and prints the typed
outcome) and the rooms that do the work. Only here do the engine's outcomes meet the store.

- render (a version request resolved and its context written), recipes (`recipes list`, `check-upstream`), locks,
  ci_files (`ci render`);
- image (`envbuild image`, over build's steps: a context built, verified and filed as an attempt; build_record: the
  attempt's directory, its build-record.json and matrix row), sif, inspect, doctor;
- run (`run workload`: the matrix checked, a run on its route under a watch of its conditions, recorded; run_result:
  its final result.json and attempt; run_identity: an image's claims against the host's checks), slurm_jobs (over
  slurm_submit and slurm_collect);
- matrix_views (`matrix list | show | export | check`), import_results (with import_builds), attestations (sign,
  verify; verify_build: a build record at the door, its cell recomputed), publish (with publish_build), cell_diff
  (`matrix diff`), report_site (`report`); matrix_file: the matrix file the verbs open;
- errors: what a workflow raises for the CLI to say, with its exit code.

A workflow tells progress through a `notify` callback (lines, or small event records the CLI renders), and hands it
down to the engine, which tells its own the same way. It may import engine, report, attest, store, plan and the
neutral modules; only `builder.cli` imports it. No Click here."""
