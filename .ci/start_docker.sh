#!/usr/bin/env bash
# Start a Docker engine for CI if none answers yet (idempotent; installs nothing).
# dockerd runs in the background without iptables or a default bridge (CI sandboxes often forbid
# both): builds and runs that need the network use `--network host`.
set -euo pipefail

DOCKER=${DOCKER:-/usr/bin/docker}
[ -x "$DOCKER" ] || DOCKER=$(command -v docker || true)
LOG=${DOCKERD_LOG:-/var/log/envbuild-dockerd.log}
WAIT_S=${DOCKERD_WAIT_S:-60}

if [ -z "$DOCKER" ]; then
  echo "start_docker: no docker client found; install docker.io (apt-get install docker.io)" >&2
  exit 1
fi
if "$DOCKER" info >/dev/null 2>&1; then
  echo "start_docker: engine already reachable ($("$DOCKER" version --format '{{.Server.Version}}'))"
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "start_docker: engine not reachable and no dockerd on PATH; install docker.io" >&2
  exit 1
fi

echo "start_docker: starting dockerd (log: $LOG)"
nohup dockerd --iptables=false --ip6tables=false --bridge=none --storage-driver=overlay2 \
  >"$LOG" 2>&1 &
pid=$!
for _ in $(seq "$WAIT_S"); do
  if "$DOCKER" info >/dev/null 2>&1; then
    echo "start_docker: engine up ($("$DOCKER" version --format '{{.Server.Version}}'), pid $pid)"
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "start_docker: dockerd exited early; last log lines:" >&2
    tail -n 30 "$LOG" >&2
    exit 1
  fi
  sleep 1
done
echo "start_docker: dockerd did not answer within ${WAIT_S}s; last log lines:" >&2
tail -n 30 "$LOG" >&2
exit 1
