"""Self-launch of data parallelism: `python -m workload train` started plainly re-runs itself under torchrun.

The parent resolves how many processes to start (`--nproc auto`: one per visible GPU, 1 on the CPU),
checks that the visible-device variables agree with the GPUs torch sees, starts
`python -m torch.distributed.run --standalone --nproc_per_node N --max_restarts 0 -m workload train ...`
in its own session, forwards SIGINT/SIGTERM to it, and when it ends makes sure result.json tells the
truth: a rank that died or hung is an `error` (`process_died` / `distributed_timeout`), never a pass.
Ranks know they were launched because torchrun sets WORLD_SIZE; they never launch again.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Mapping

from .errors import WorkloadError
from .result import RESULT_FILE, finish, write_result

#: torchrun gives the ranks 30 s after forwarding a signal before it kills them; the parent waits a bit longer.
STOP_GRACE_S = 45.0


class LaunchRequestError(ValueError):
    """A --nproc/--device combination that cannot be launched (a usage error, exit code 2)."""


class VisibleDevicesMismatch(WorkloadError):
    """HIP/ROCR/CUDA_VISIBLE_DEVICES disagree with each other or with the GPUs torch sees."""

    error_class = "visible_devices_mismatch"


def under_launcher(environ: Mapping[str, str] = os.environ) -> bool:
    """True in a rank started by torchrun (or by hand with WORLD_SIZE set): never launch again."""
    return "WORLD_SIZE" in environ


def parse_nproc(text: str) -> str | int:
    """argparse type for --nproc: "auto" or a positive integer."""
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{text!r}: use 'auto' or a number of processes >= 1")
    return value


def resolve_nproc(requested: str | int, device_name: str, gpu_count: int) -> int:
    """How many ranks to start: auto = one per visible GPU (device auto/cuda), else 1; N as asked.

    N > 1 on the CPU (no GPU, or --device cpu) starts N gloo processes; on GPUs N may not exceed the
    visible GPUs, and a pinned --device cuda:K runs one process."""
    on_gpu = gpu_count > 0 and device_name in ("auto", "cuda")
    if requested == "auto":
        return gpu_count if on_gpu else 1
    if requested > 1 and device_name.startswith("cuda:"):
        raise LaunchRequestError(
            f"--nproc {requested} with --device {device_name}: ranks pick their own GPU; "
            "use --device auto (or cuda) for data parallelism, or --nproc 1"
        )
    if on_gpu and requested > gpu_count:
        raise LaunchRequestError(
            f"--nproc {requested}: only {gpu_count} GPU(s) are visible; use --nproc auto "
            f"or at most {gpu_count} (one process per GPU)"
        )
    return requested


def visible_devices_problem(environ: Mapping[str, str], rocm: bool, gpu_count: int) -> str | None:
    """Why the visible-device variables disagree with each other or with torch's GPU count, or None.

    The counting rules are the device_discovery probe's (workload/probes/device.py)."""
    from .probes.device import VISIBLE_DEVICE_VARS, check_device_count, visible_device_limit

    env = {k: environ[k] for k in VISIBLE_DEVICE_VARS if k in environ}
    limit, variable, notes = visible_device_limit(env, rocm)
    status, message = check_device_count(gpu_count, limit, variable)
    problems = ([message] if status == "fail" else []) + notes
    if not problems:
        return None
    shown = " ".join(f"{k}={v!r}" for k, v in env.items())
    return f"{'; '.join(problems)} ({shown}): set the variables to the same devices, or unset the extra ones"


def rank_argv(train_argv: list[str]) -> list[str]:
    """The ranks' arguments: the parent's without --nproc (torchrun's parser would take it for its
    --nproc_per_node; ranks never launch anyway)."""
    out, skip = [], False
    for arg in train_argv:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            out.append(arg)
    return out


def torchrun_command(train_argv: list[str], nproc: int) -> list[str]:
    """The torchrun command line for the same `train` arguments (flags spelt as every torch 2.x accepts)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "--max_restarts=0",
        "--monitor_interval=1",
        "-m",
        "workload",
        *rank_argv(train_argv),
    ]


def descendants(pid: int) -> list[int]:
    """All live descendants of `pid` (Linux /proc); torchrun starts each rank in a session of its own."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                children = Path(f"/proc/{parent}/task/{tid}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.append(child)
                    todo.append(child)
    return found


def _kill_all(proc: subprocess.Popen) -> None:
    for pid in [*descendants(proc.pid), proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def root_cause(torchrun_log: str) -> str | None:
    """ "rank R (local_rank L) failed: exitcode ..." from the failure summary torchrun prints last, or None."""
    block = torchrun_log.rsplit("Root Cause", 1)
    rank = re.search(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)", block[-1]) if len(block) == 2 else None
    code = re.search(r"exitcode\s*:\s*(.+)", block[-1]) if rank else None
    if not (rank and code):
        return None
    exit_text = " ".join(re.sub(r"\(pid:\s*\d+\)", "", code.group(1)).split())
    return f"rank {rank.group(1)} (local_rank {rank.group(2)}) failed first: exit code {exit_text}"


def _copy_stderr(stream, tail: collections.deque) -> None:
    """Copy torchrun's (and the ranks') stderr to ours, keeping the last lines for root_cause()."""
    sink = getattr(sys.stderr, "buffer", None)
    for line in iter(stream.readline, b""):
        if sink is not None:
            sink.write(line)
            sink.flush()
        else:
            sys.stderr.write(line.decode("utf-8", "replace"))
        tail.append(line.decode("utf-8", "replace"))


def run_supervised(command: list[str], grace_s: float = STOP_GRACE_S) -> tuple[int, int | None, str | None]:
    """Run torchrun; forward SIGINT/SIGTERM to it; (exit code, first signal received or None, root cause).

    A second signal, or torchrun still running `grace_s` after the first, kills torchrun and every rank."""
    received: list[tuple[int, float]] = []
    proc: subprocess.Popen | None = None

    def forward(signum, frame):
        received.append((signum, time.monotonic()))
        if proc is not None and len(received) == 1:
            proc.send_signal(signum)
        elif proc is not None:
            _kill_all(proc)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    tail: collections.deque = collections.deque(maxlen=200)
    try:
        if received:  # stopped before anything started
            return 128 + received[0][0], received[0][0], None
        # Its own session: a terminal's Ctrl-C reaches torchrun once, through us.
        proc = subprocess.Popen(command, start_new_session=True, stderr=subprocess.PIPE)
        reader = threading.Thread(target=_copy_stderr, args=(proc.stderr, tail), daemon=True, name="torchrun-stderr")
        reader.start()
        if received:  # a signal that came while it was starting
            proc.send_signal(received[0][0])
        while True:
            try:
                code = proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                if received and time.monotonic() - received[0][1] > grace_s:
                    _kill_all(proc)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    reader.join(timeout=5)  # a rank that outlived torchrun may hold the pipe open: do not wait for it
    return code, (received[0][0] if received else None), (root_cause("".join(tail)) if code else None)


def reconcile(
    out_dir: Path | None, envelope: dict, code: int, signum: int | None, cause: str | None = None
) -> tuple[int, dict | None]:
    """Make result.json truthful after torchrun ended: (exit code of the whole run, 0 only for a pass;
    the final result, None without out_dir).

    `envelope` is the placeholder the parent wrote (its run_id tells whether rank 0 ever wrote). Kept as
    rank 0 wrote it: a pass with every rank exiting 0, and any specific failure (distributed_timeout,
    data_error, did_not_learn, ...). Rewritten: a pass while another rank failed, rank 0's `interrupted`
    when torchrun stopped it because another rank died, and a result rank 0 never wrote."""
    if out_dir is None:
        return (0 if code == 0 and signum is None else 1), None
    try:
        written = json.loads((Path(out_dir) / RESULT_FILE).read_text())
    except (OSError, ValueError):
        written = None
    by_rank0 = isinstance(written, dict) and written.get("run_id") != envelope["run_id"]
    if by_rank0 and code == 0 and signum is None:
        return (0 if written.get("status") == "pass" else 1), written
    if (
        by_rank0
        and written.get("status") != "pass"
        and (written.get("error_class") != "interrupted" or signum is not None)
    ):
        return 1, written
    if signum is not None:
        error_class = "interrupted"
        message = f"interrupted ({signal.Signals(signum).name}); torchrun stopped the training processes"
    else:
        error_class = "process_died"
        message = (
            f"a training process failed ({cause or f'torchrun exit code {code}; its log names the rank'}) "
            "and torchrun stopped the others"
        )
    result = dict(written) if by_rank0 else dict(envelope)
    if by_rank0:
        message += f"; rank 0 had recorded {written.get('status')}" + (
            f" ({written['error_class']})" if written.get("error_class") else ""
        )
        result["_t0"] = envelope["_t0"]
    write_result(out_dir, finish(result, "error", error_class, message))
    print(f"[workload] error ({error_class}): {message}", file=sys.stderr, flush=True)
    return 1, result
