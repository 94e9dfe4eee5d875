#!/usr/bin/env bash
# A one-node Slurm cluster with Apptainer, for the HPC tests (tests/integration/test_hpc.py), on a Debian host as root.
#
#   bash .ci/hpc_cluster.sh start    build (or reuse) the sid tree, start the cluster, write the wrappers
#   bash .ci/hpc_cluster.sh stop     end the cluster (every process of it)
#   bash .ci/hpc_cluster.sh status   sinfo, or exit 1 when no cluster runs
#
# Apptainer 1.4.5 and Slurm 26.05 come from Debian sid (Apptainer needs glibc >= 2.38, so not bookworm):
# the tree is debootstrapped once into $ENVBUILD_HPC_CACHE and reused while its recipe (this file's TREE_*
# lines) is unchanged. Each start lays a fresh overlay on it, so no run changes the cached tree.
# The cluster lives in its own mount, UTS, network and PID namespaces, pivot_root'ed into the tree
# (Apptainer refuses a chroot). Inside: munged, mariadbd + slurmdbd (so sacct works), slurmctld and slurmd
# on the node "hpc-node0". Jobs run as the unprivileged user $HPC_USER, the only way `apptainer exec`
# works here (as root it asks for CAP_SYS_RESOURCE, which this sandbox lacks).
#
# The host reaches it through wrappers in $ENVBUILD_HPC_STATE/bin (sbatch, squeue, sacct, scontrol, sinfo,
# scancel, sacctmgr, apptainer, singularity), which nsenter the namespaces and run the command as $HPC_USER in
# the caller's directory; login-apptainer is the same Apptainer in the host's network (a login node's, for
# builds). The host directories in $ENVBUILD_HPC_SHARED (colon-separated, default /tmp) are bound at the same
# paths inside, so a path means the same file on both sides; what a job must write
# there has to be writable by $HPC_USER.
set -euo pipefail

CACHE=${ENVBUILD_HPC_CACHE:-/var/cache/envbuild-hpc}
STATE=${ENVBUILD_HPC_STATE:-/run/envbuild-hpc}
SHARED=${ENVBUILD_HPC_SHARED:-/tmp}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
HPC_USER=hpcuser
HPC_UID=2300
NODE=hpc-node0
TREE_SUITE=sid
TREE_PACKAGES="slurmctld slurmd slurm-client slurmdbd mariadb-server munge apptainer squashfs-tools squashfuse fuse3 ca-certificates procps"
TREE_VERSION=3   # bump when the tree's set-up below changes
TREE="$CACHE/sid-root"
OLD_MARIADB=/opt/envbuild-hpc/libmariadb-bookworm

log() { echo "hpc_cluster: $*" >&2; }
die() { log "$*"; exit 1; }

tree_key() { echo "$TREE_VERSION $TREE_SUITE $TREE_PACKAGES $HPC_USER $HPC_UID"; }

build_tree() {
  if [ -f "$TREE/.envbuild-tree" ] && [ "$(cat "$TREE/.envbuild-tree")" = "$(tree_key)" ]; then
    log "reusing the cached tree $TREE"
    return
  fi
  command -v debootstrap >/dev/null || die "needs debootstrap (apt-get install debootstrap)"
  mkdir -p "$CACHE"
  local new="$CACHE/sid-root.new.$$"
  rm -rf "$new"
  trap 'umount "$new/proc" 2>/dev/null; rm -rf "$new"' EXIT
  log "debootstrap --variant=minbase $TREE_SUITE into $new"
  debootstrap --variant=minbase "$TREE_SUITE" "$new" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
  printf '#!/bin/sh\nexit 101\n' >"$new/usr/sbin/policy-rc.d"   # no service starts during installs
  chmod +x "$new/usr/sbin/policy-rc.d"
  printf '127.0.0.1 localhost %s\n' "$NODE" >"$new/etc/hosts"
  mount -t proc proc "$new/proc"
  # sid's Release files can be past their Valid-Until on a mirror snapshot; the archive key still signs them
  if ! chroot "$new" env DEBIAN_FRONTEND=noninteractive sh -c "
      apt-get -qq -o Acquire::Check-Valid-Until=false update &&
      apt-get install -y -qq --no-install-recommends $TREE_PACKAGES" >"$CACHE/apt.log" 2>&1; then
    tail -20 "$CACHE/apt.log" >&2; die "apt-get install in the tree failed (log: $CACHE/apt.log)"
  fi
  # slurmdbd 26.05.5 fails its first query through sid's libmariadb3 (1:11.8.9+ds-4: "5027 Number of
  # columns in result (=1) set exceeds maximum allowed number of columns (=0)"); bookworm's libmariadb3
  # (same soname) works. It is kept aside in $OLD_MARIADB and only slurmdbd loads it.
  if ! chroot "$new" sh -c "
      set -e
      echo 'deb $MIRROR bookworm main' >/etc/apt/bookworm.list
      o='-o Dir::Etc::SourceList=/etc/apt/bookworm.list -o Dir::Etc::SourceParts=/dev/null
         -o Dir::State::Lists=/var/lib/apt/bookworm-lists -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache='
      mkdir -p /var/lib/apt/bookworm-lists/partial $OLD_MARIADB /tmp/libmariadb
      apt-get -qq \$o update
      cd /tmp/libmariadb && apt-get -qq \$o download libmariadb3/bookworm
      dpkg-deb -x libmariadb3_*.deb x
      cp x/usr/lib/x86_64-linux-gnu/libmariadb.so.3 $OLD_MARIADB/
      cd / && rm -rf /tmp/libmariadb /var/lib/apt/bookworm-lists /etc/apt/bookworm.list" >>"$CACHE/apt.log" 2>&1; then
    tail -20 "$CACHE/apt.log" >&2; die "fetching bookworm's libmariadb3 failed (log: $CACHE/apt.log)"
  fi
  chroot "$new" sh -c "
    set -e
    useradd --uid $HPC_UID --create-home --shell /bin/bash $HPC_USER
    mariadb-install-db --user=mysql --skip-test-db >/dev/null
    mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /etc/mysql/mariadb.conf.d
    chown slurm:slurm /var/spool/slurmctld /var/log/slurm
    # what slurmdbd asks of the database (its start-up check names these)
    printf '[mariadbd]\\ninnodb_snapshot_isolation=OFF\\ninnodb_lock_wait_timeout=900\\n' >/etc/mysql/mariadb.conf.d/90-slurm.cnf
    chown -R munge:munge /etc/munge
    chmod 0400 /etc/munge/munge.key
    rm -rf /var/cache/apt/archives/*.deb /var/lib/apt/lists/*"
  umount "$new/proc"
  write_configs "$new"
  tree_key >"$new/.envbuild-tree"
  rm -rf "$TREE"
  mv "$new" "$TREE"
  trap - EXIT
  log "tree ready: $TREE ($(du -sh "$TREE" | cut -f1))"
}

write_configs() {
  local root=$1 cpus
  cpus=$(nproc); [ "$cpus" -ge 4 ] || cpus=4   # config_overrides: room for a 3-task array on a 2-core host
  cat >"$root/etc/slurm/slurm.conf" <<EOF
ClusterName=envbuild
SlurmctldHost=$NODE
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$NODE
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=5
MinJobAge=3600
NodeName=$NODE CPUs=$cpus RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  cat >"$root/etc/slurm/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=$NODE
SlurmUser=slurm
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=slurm
StoragePass=envbuild-hpc-local
StorageLoc=slurm_acct_db
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd/slurmdbd.pid
EOF
  chroot "$root" sh -c "chown slurm:slurm /etc/slurm/slurmdbd.conf && chmod 0600 /etc/slurm/slurmdbd.conf"
}

# Runs as PID 1 of the new namespaces: lay the overlay, pivot_root, start the daemons, then wait.
inside() {
  local run=$1 new
  new="$run/root"
  mkdir -p "$run/upper" "$run/work" "$new"
  mount -t overlay overlay -o "lowerdir=$TREE,upperdir=$run/upper,workdir=$run/work" "$new"
  mount -t proc proc "$new/proc"
  mount --rbind /sys "$new/sys"
  # a /dev of its own: the host's /dev/fuse is root-only, and Apptainer (as the job user) mounts SIFs with
  # squashfuse through it; without it every `apptainer exec` unpacks the whole SIF first
  mount -t tmpfs -o mode=0755,nosuid tmpfs "$new/dev"
  local node spec
  for spec in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0 fuse:10:229; do
    IFS=: read -r node major minor <<<"$spec"
    mknod -m 0666 "$new/dev/$node" c "$major" "$minor"
  done
  mkdir -p "$new/dev/pts" "$new/dev/shm"
  mount --bind /dev/pts "$new/dev/pts"
  ln -s pts/ptmx "$new/dev/ptmx"
  ln -s /proc/self/fd "$new/dev/fd"
  ln -s /proc/self/fd/0 "$new/dev/stdin"
  ln -s /proc/self/fd/1 "$new/dev/stdout"
  ln -s /proc/self/fd/2 "$new/dev/stderr"
  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$new/dev/shm"
  for node in kfd dri; do   # GPUs, where the host has them
    [ -e "/dev/$node" ] || continue
    if [ -d "/dev/$node" ]; then mkdir -p "$new/dev/$node"; else touch "$new/dev/$node"; fi
    mount --rbind "/dev/$node" "$new/dev/$node"
  done
  mount -t tmpfs -o mode=0755 tmpfs "$new/run"
  local d
  IFS=: read -r -a dirs <<<"$SHARED"
  for d in "${dirs[@]}"; do
    [ -d "$d" ] || continue
    mkdir -p "$new$d"
    mount --rbind "$d" "$new$d"
  done
  hostname "$NODE"
  ip link set lo up
  # a non-loopback address: without one, getaddrinfo(AI_ADDRCONFIG) finds nothing and slurmdbd cannot listen
  ip link add hpc0 type veth peer name hpc1
  ip addr add 10.230.0.1/24 dev hpc0
  ip link set hpc0 up
  ip link set hpc1 up
  mkdir -p "$new/.oldroot"
  cd "$new"
  pivot_root . .oldroot
  cd /
  umount -l /.oldroot
  rmdir /.oldroot
  export PATH=/usr/sbin:/usr/bin:/sbin:/bin
  mkdir -p /run/munge /run/mariadbd /run/slurmdbd /run/slurmctld
  chown munge:munge /run/munge
  chown mysql:mysql /run/mariadbd
  chown slurm:slurm /run/slurmdbd /run/slurmctld
  runuser -u munge -- munged
  runuser -u mysql -- mariadbd --skip-networking=0 --bind-address=127.0.0.1 >/var/log/mariadbd.log 2>&1 &
  wait_for "mariadbd" 30 mariadb -e 'select 1'
  # a password over TCP: the database listens on this namespace's own loopback only
  mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'envbuild-hpc-local';
              GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
  LD_LIBRARY_PATH=$OLD_MARIADB slurmdbd
  wait_for "slurmdbd" 30 sacctmgr -n list cluster
  sacctmgr -i add cluster envbuild >/dev/null
  slurmctld
  slurmd
  wait_for "the node" 60 sh -c "sinfo -h -n $NODE -o %t | grep -qx idle"
  echo ready >/var/lib/envbuild-hpc-ready
  trap 'exit 0' TERM INT
  while :; do sleep 3600 & wait $!; done
}

wait_for() {
  local what=$1 seconds=$2; shift 2
  local i
  for ((i = 0; i < seconds * 5; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  die "$what did not come up in ${seconds}s"
}

holder_pid() {
  [ -f "$STATE/pid" ] || return 1
  local parent child
  parent=$(cat "$STATE/pid")
  [ -d "/proc/$parent" ] || return 1
  child=$(cat "/proc/$parent/task/$parent/children" 2>/dev/null | awk '{print $1}')
  [ -n "$child" ] || return 1
  echo "$child"
}

write_wrappers() {
  local bin="$STATE/bin" pid=$1 cmd
  mkdir -p "$bin"
  cat >"$bin/hpc-exec" <<EOF
#!/bin/sh
# Run a command in the envbuild HPC cluster as $HPC_USER, in the caller's directory (or / if it is not shared).
# HPC_AS_ROOT=1 runs it as root instead; HPC_HOST_NET=1 in the host's network instead of the cluster's (as on a
# login node, where a build fetches packages).
dir=\$PWD
user=$HPC_USER
net=--net
[ "\${HPC_AS_ROOT:-0}" = 1 ] && user=root
[ "\${HPC_HOST_NET:-0}" = 1 ] && net=
exec nsenter --target $pid --mount --uts \$net --pid --root --wd -- \\
  /usr/sbin/runuser -u "\$user" -- /bin/sh -c 'cd "\$0" 2>/dev/null || cd /; exec "\$@"' "\$dir" "\$@"
EOF
  chmod +x "$bin/hpc-exec"
  # `singularity`: Debian's apptainer package installs it as another name of apptainer (no SingularityCE package)
  for cmd in sbatch squeue sacct scontrol sinfo scancel sacctmgr apptainer singularity; do
    printf '#!/bin/sh\nexec "%s/hpc-exec" %s "$@"\n' "$bin" "$cmd" >"$bin/$cmd"
    chmod +x "$bin/$cmd"
  done
  # the login node's Apptainer: the cluster's users and file systems, the host's network (`envbuild sif
  # --from-context` builds there: its %post fetches the OS packages and the locked stack)
  printf '#!/bin/sh\nHPC_HOST_NET=1 exec "%s/hpc-exec" apptainer "$@"\n' "$bin" >"$bin/login-apptainer"
  chmod +x "$bin/login-apptainer"
}

start() {
  if pid=$(holder_pid); then log "already running (pid $pid); wrappers in $STATE/bin"; return; fi
  build_tree
  local run
  rm -rf "$STATE" "$CACHE"/run.*   # what a cluster that was never stopped (a killed CI run) left: one cluster per cache
  mkdir -p "$STATE"
  run=$(mktemp -d "$CACHE/run.XXXXXX")
  echo "$run" >"$STATE/run"
  setsid unshare --mount --uts --net --pid --fork --propagation private \
    env ENVBUILD_HPC_CACHE="$CACHE" ENVBUILD_HPC_SHARED="$SHARED" bash "$0" _inside "$run" \
    >"$STATE/cluster.log" 2>&1 </dev/null &
  echo $! >"$STATE/pid"
  local i pid=""
  for ((i = 0; i < 600; i++)); do
    pid=$(holder_pid) && [ -f "$run/upper/var/lib/envbuild-hpc-ready" ] && break
    kill -0 "$(cat "$STATE/pid")" 2>/dev/null || { dump_logs "$run"; stop; die "the cluster did not start"; }
    sleep 0.2
  done
  [ -f "$run/upper/var/lib/envbuild-hpc-ready" ] || { dump_logs "$run"; stop; die "the cluster did not get ready in 120s"; }
  write_wrappers "$pid"
  log "cluster up (namespaces of pid $pid); wrappers in $STATE/bin"
}

dump_logs() {
  local f
  cat "$STATE/cluster.log" >&2
  for f in "$1"/upper/var/log/mariadbd.log "$1"/upper/var/log/slurm/*.log; do
    [ -f "$f" ] && { log "--- $f"; tail -15 "$f" >&2; }
  done
  return 0
}

stop() {
  local pid
  if pid=$(holder_pid); then
    kill -KILL "$pid" 2>/dev/null || true   # PID 1 of its namespace: the kernel ends every process in it
    wait_gone "$(cat "$STATE/pid")"
  fi
  if [ -f "$STATE/run" ]; then rm -rf "$(cat "$STATE/run")"; fi
  rm -rf "$STATE"
  log "stopped"
}

wait_gone() {
  local i
  for ((i = 0; i < 100; i++)); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) holder_pid >/dev/null || die "not running"; "$STATE/bin/sinfo" ;;
  _inside) inside "$2" ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
