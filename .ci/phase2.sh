#!/usr/bin/env bash
# CI's phase 2, started by .ci/run beside phase 1: the engine, the local base image and the one-node Slurm + Apptainer
# (tests/integration/test_hpc.py), then, once the venv exists (the file named by $1 appears), the Docker tests with
# skipping a failure, in two lanes side by side (tests/conftest.py): the cluster's tests and the no-cache rebuild beside
# the rest, each lane one pytest process.
#   bash .ci/phase2.sh VENV_READY_FILE
set -euo pipefail
cd "$(dirname "$0")/.."
venv_ready=${1:?usage: phase2.sh VENV_READY_FILE}
started=$SECONDS
bash .ci/start_docker.sh
bash .ci/local_base_image.sh
bash .ci/hpc_cluster.sh start
echo "ci: phase 2 set-up took $((SECONDS - started)) s"
until [ -e "$venv_ready" ]; do sleep 2; done
echo "ci: phase 2 waited for the venv until $((SECONDS - started)) s"
started=$SECONDS
export ENVBUILD_REQUIRE_DOCKER=1 ENVBUILD_REQUIRE_HPC=1
lane_log=$(mktemp)
.venv/bin/python -m pytest -q -p no:cacheprovider -m "docker and second_lane" >"$lane_log" 2>&1 &
lane_pid=$!
first_rc=0
.venv/bin/python -m pytest -q -p no:cacheprovider -m "docker and not second_lane" || first_rc=$?
second_rc=0
wait "$lane_pid" || second_rc=$?
echo "ci: the second lane (-m \"docker and second_lane\"):"
cat "$lane_log"
echo "ci: phase 2 tests (docker, two lanes) took $((SECONDS - started)) s"
[ "$first_rc" = 0 ] && [ "$second_rc" = 0 ] || { echo "ci: docker tests failed (lanes: $first_rc, $second_rc)"; exit 1; }
