"""A hostile image, built here for the threat-model tests: a shell, a few programs from the local base (no registry)
and a `python3` that is a shell script, about 3 MB. It has no torch; it attacks the host that measures it.

The probe (`python3 -I -c ...`) answers by the name it was started as (--python picks it):
- python3: lies: a ROCm torch 2.4.1 on Python 3.10 with every package of that lock installed (so nothing is brought
  in), as a real rocm/pytorch image would answer;
- python3-huge: 1 GiB of output, then the same answer; python3-endless: output that never ends;
- python3-hang: never answers, ignoring SIGTERM and SIGINT;
- python3-escapes: no torch, its error and its path full of terminal escapes (a hyperlink, clear-screen).

The run (`python3 -m workload train ... --out DIR [-- --claim gpu|cpu --victim PATH --flood --hang]`) races envbuild
for its files (links `DIR/container.log` and others to PATH, `third-party.log` to /dev/zero, ten times over a second,
then `container.log` to /dev/zero for whoever reads it back), prints its environment, its mount points and any
token file it can find, prints terminal escapes, and writes a result: `gpu` (default) claims a pass on an MI250X
(gfx90a), `cpu` a pass on the CPU with the versions its probe named. `--flood` prints without end instead; `--hang`
never ends on its own and ignores SIGTERM (SIGINT, which envbuild sends first, ends it).
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

from matrix_fixtures import make_result

from builder.paths import RECIPES_DIR
from builder.plan import lock as lockfile
from builder.plan import recipes

DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
TAG = "envbuild-test/hostile:1"
AMD_NAMED = "rocm/pytorch:envbuild-hostile"
ESCAPES = "\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07\x1b[2J\x1b[H"
PROBE_NAMES = ("huge", "endless", "hang", "escapes")

FAKE_PYTHON = r"""#!/bin/sh
mode=${0##*/}
if [ "$1" = "-I" ]; then
  case "$mode" in
    python3-endless) exec yes "the probe never stops talking" ;;
    python3-huge) head -c 1073741824 /dev/zero | tr '\0' x; echo; cat /hostile/probe.line; exit 0 ;;
    python3-hang) trap '' TERM INT HUP; while :; do sleep 1; done ;;
    python3-escapes) cat /hostile/probe-escapes.line; exit 0 ;;
    *) cat /hostile/probe.line; exit 0 ;;
  esac
fi
out=/out claim=gpu victim= flood= hang=
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift ;;
    --claim) claim=$2; shift ;;
    --victim) victim=$2; shift ;;
    --flood) flood=1 ;;
    --hang) hang=1 ;;
  esac
  shift
done
race() {
  for name in container.log workload.log result.invalid.json; do [ -n "$victim" ] && ln -sfn "$victim" "$out/$name"; done
  ln -sfn /dev/zero "$out/third-party.log"
}
race
echo "HOSTILE-ENV $(env | tr '\n' ' ')"
echo "HOSTILE-MOUNTS $(awk '{print $5}' /proc/self/mountinfo | tr '\n' ' ')"
for f in /hf-cache/token /hf-cache/stored_tokens /hf-cache/hub/token /root/.cache/huggingface/token \
    /tmp/.cache/huggingface/token; do
  [ -r "$f" ] && echo "HOSTILE-FILE $f $(cat "$f")"
done
printf 'HOSTILE-ESC %s\n' "$(cat /hostile/escapes)"
[ -n "$flood" ] && exec yes "flooding the log: the run never stops talking"
if [ -n "$hang" ]; then trap '' TERM HUP; trap 'exit 130' INT; while :; do sleep 1; done; fi
for i in 1 2 3 4 5 6 7 8 9 10; do race; sleep 0.1; done
ln -sfn /dev/zero "$out/container.log"
cp "/hostile/result-$claim.json" "$out/result.json"
exit 0
"""

#: No package and no RUN step (this engine may have no bridge network to build with): the shell, the few programs
#: the script uses and their libraries, copied from the local base into an empty image (about 3 MB, so its SIF
#: builds in seconds).
_LIB = "/lib/x86_64-linux-gnu"
DOCKERFILE = f"""\
FROM {{base}} AS base
FROM scratch
COPY --from=base {_LIB}/libc.so.6 {_LIB}/libm.so.6 {_LIB}/libacl.so.1 {_LIB}/libattr.so.1 \\
    {_LIB}/libselinux.so.1 {_LIB}/libpcre2-8.so.0 {_LIB}/
COPY --from=base /lib64/ld-linux-x86-64.so.2 /lib64/
COPY --from=base /bin/dash /bin/sh
COPY --from=base /usr/bin/mawk /bin/awk
COPY --from=base /usr/bin/yes /usr/bin/head /usr/bin/tr /bin/cat /bin/sleep /bin/ln /bin/cp /usr/bin/env /bin/
COPY rootfs /
ENV PATH=/hostile/bin:/bin
"""

PYTHON, TORCH, HIP = "3.10.14", "2.4.1+rocm6.2", "6.2.41133-dd7f95766"


def probe_answer(**changes) -> dict:
    """The lying probe's answer: torch 2.4.1 built for ROCm 6.2 on Python 3.10, every locked package installed."""
    lock = lockfile.read(recipes.load(RECIPES_DIR), "2.4", "3.10")
    answer = {
        "python": PYTHON,
        "machine": "x86_64",
        "libc": ["glibc", "2.35"],
        "executable": "/opt/conda/envs/py_3.10/bin/python3",
        "distributions": {e.name: e.version for e in lock.entries("stack")},
        "torch": {"version": TORCH, "hip": HIP, "cuda": None, "file": "/opt/conda/lib/torch/__init__.py"},
        "torch_error": None,
        "rocm_release": "6.2.0",
    }
    answer.update(changes)
    return answer


def forged_results() -> dict[str, dict]:
    """The results the run writes: `gpu` a pass on gfx90a, `cpu` a pass on the CPU; both dated now."""
    now = time.time()
    stamp = lambda t: datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    when = {"started_at": stamp(now - 60), "finished_at": stamp(now - 20), "wall_time_s": 40.0}
    gpu = make_result(**when)
    gpu["versions"].update(python=PYTHON, torch=TORCH, hip=HIP)
    cpu = copy.deepcopy(gpu)
    cpu["run_id"] = gpu["run_id"][::-1]
    cpu["hardware"] = {
        "device_type": "cpu",
        "vendor": "cpu",
        "gpu_name": None,
        "arch": None,
        "gpu_count": 0,
        "peak_tflops": None,
    }
    cpu["metrics"]["mfu"] = None
    return {"gpu": gpu, "cpu": cpu}


def build_hostile_image(base: str, work: Path, tag: str = TAG) -> str:
    """Build the hostile image from the local base (seconds: no package is installed)."""
    ctx = work / "hostile-image"
    files = ctx / "rootfs" / "hostile"
    files.mkdir(parents=True, exist_ok=True)
    (ctx / "rootfs" / "tmp").mkdir(exist_ok=True)
    (ctx / "rootfs" / "tmp").chmod(0o1777)
    (files / "python3").write_text(FAKE_PYTHON)
    (files / "python3").chmod(0o755)
    (files / "bin").mkdir(exist_ok=True)
    for name in ("python3", *(f"python3-{m}" for m in PROBE_NAMES)):
        (files / "bin" / name).unlink(missing_ok=True)
        (files / "bin" / name).symlink_to("/hostile/python3")
    (files / "probe.line").write_text("ENVBUILD-PROBE " + json.dumps(probe_answer()) + "\n")
    escapes = probe_answer(
        executable=f"/usr/bin/python3{ESCAPES}", torch=None, torch_error=f"ImportError: no torch {ESCAPES}"
    )
    (files / "probe-escapes.line").write_text("ENVBUILD-PROBE " + json.dumps(escapes) + "\n")
    (files / "escapes").write_text(ESCAPES)
    for claim, result in forged_results().items():
        (files / f"result-{claim}.json").write_text(json.dumps(result))
    (ctx / "Dockerfile").write_text(DOCKERFILE.format(base=base))
    proc = subprocess.run(
        [DOCKER, "build", "-q", "-t", tag, str(ctx)],
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"docker build {tag} failed: {proc.stderr[-3000:]}")
    return tag


def measured(argv: list[str], *, env: dict, cwd: Path, timeout: float = 300) -> dict:
    """Run the real CLI under /usr/bin/time: exit code, output (stdout and stderr), peak RSS in MB, seconds. Past
    `timeout` the whole session is stopped (SIGTERM, then SIGKILL) before the test fails: nothing outlives it."""
    stats = cwd / f".time-{time.monotonic_ns()}"
    started = time.monotonic()
    proc = subprocess.Popen(
        ["/usr/bin/time", "-f", "%M", "-o", str(stats), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 10)):
            os.killpg(proc.pid, sig)
            try:
                proc.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        raise
    seconds = time.monotonic() - started
    rss_kb = int(stats.read_text().split()[-1]) if stats.is_file() else 0
    return {"code": proc.returncode, "output": output, "rss_mb": rss_kb / 1024, "seconds": seconds}
