"""The engine: everything that touches Docker, Apptainer, Slurm or the host. docker (the SDK client, BuildKit
detection), build and build_log (BuildKit builds and their failure classes), ccache_stats (ccache's hits in a build
log), build_host (the engine's memory and CPUs, the host's memory in use during a build), the run routes (runner: their
one interface, its requests and events; routes: the table that picks one; container, local_run, managed_run and
apptainer: the workload in a container, on this host or in a SIF, each returning how the run ended, run_result.RunEnd;
run_output keeps a container's output bounded and scrubbed; foreign, foreign_docker and foreign_sif measure an image
or SIF envbuild did not build; venv_route a venv), apptainer_build (SIFs), slurm (the sbatch script, sacct, end
states), doctor (host checks), conditions, repro (rebuild-and-compare), accelerator (the host's GPU, for a managed
workload environment) and workload_env (that environment, made with uv). It writes no database and validates no
result: the workflows do. No Click and no rich: progress goes to a `notify` callback as lines or small event
records. It imports `builder.plan` and the neutral modules; only `builder.workflows`
imports it."""
