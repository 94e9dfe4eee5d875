"""The engine: everything that touches Docker or the host. docker (the SDK client, BuildKit detection),
build and build_log (BuildKit builds and their failure classes), container and local_run (the workload in
a container or on this host), doctor (host checks), interrupt (Ctrl-C/SIGTERM), repro (rebuild-and-compare).
build_record and run_result file a finished build or run into an
attempt directory and the matrix: they sit here, beside their only callers (the build, the container and
local runs), and use the matrix below them; the store itself never needs them. No Click here. It may
import `builder.matrix`, `builder.plan` and `builder.paths`; only `builder.cli` imports it."""
