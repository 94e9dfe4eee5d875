"""The engine: everything that touches Docker, Apptainer, Slurm or the host. docker (the SDK client, BuildKit
detection), build and build_log (BuildKit builds and their failure classes), container, local_run and apptainer
(the workload in a container, on this host or in a SIF; each returns how the run ended, run_result.RunEnd;
run_output keeps a container's output bounded and scrubbed; foreign, foreign_docker and foreign_sif measure an image
or SIF envbuild did not build),
apptainer_build (SIFs), slurm (the sbatch script, sacct, end states), doctor (host checks), conditions,
interrupt (Ctrl-C/SIGTERM), repro (rebuild-and-compare). It writes no database and validates no result: the
workflows do. No Click here. It imports `builder.plan` and the neutral modules; only `builder.workflows` and
`builder.cli` import it."""
