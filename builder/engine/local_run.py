"""Run the workload in this Python environment: its torch, on the device it finds (a GPU when it sees one, else
the CPU); the run that works without Docker."""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import platform
import signal
import subprocess
import sys
import time

from rich.console import Console
from rich.markup import escape

from builder.engine.container import (
    WORKLOAD_BAD_INPUT,
    BadWorkloadInput,
    RunError,
    RunRequest,
    check_data,
    input_error_line,
    resolve_model,
    workload_args,
)
from builder.engine.doctor import HostView, host_record
from builder.paths import WORKLOAD_LOG
from builder.engine.interrupt import Terminated, describe, later_ctrl_c_ignored
from builder.engine.run_result import RunEnd, check_out_dir, envbuild_invocation

_DISTRIBUTIONS = {
    "torch": "torch",
    "transformers": "transformers",
    "peft": "peft",
    "accelerate": "accelerate",
    "sentencepiece": "sentencepiece",
    "safetensors": "safetensors",
    "numpy": "numpy",
}


def local_versions() -> dict:
    """Versions of this interpreter's stack (for the envelope of a run that left no result)."""
    versions = {"python": platform.python_version()}
    for key, dist in _DISTRIBUTIONS.items():
        try:
            versions[key] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[key] = None
    return versions


class MissingWorkloadPackages(RunError):
    """This interpreter lacks the workload's packages (envbuild installed without its `workload` extra)."""


def check_workload_packages() -> None:
    """Raise MissingWorkloadPackages naming the install command when a workload import would fail."""
    missing = [module for module in _DISTRIBUTIONS if importlib.util.find_spec(module) is None]
    if missing:
        raise MissingWorkloadPackages(
            f"a --local run trains in this Python ({sys.executable}), which lacks {', '.join(missing)}: install "
            "envbuild with its workload extra (`pip install 'SRC[workload]'`, `pipx install --force "
            "'SRC[workload]'` or `uv tool install 'SRC[workload]'`, SRC being your envbuild clone or wheel), or run "
            "in a built image: --image TAG"
        )


def run_local(request: RunRequest, console: Console | None = None, host: HostView | None = None) -> RunEnd:
    """`python -m workload train ...` as a subprocess of this interpreter; how it ended (the workflow completes
    its result)."""
    console = console or Console(stderr=True, soft_wrap=True)
    check_workload_packages()
    if request.gpus:
        raise RunError(
            "--gpus needs --image or --apptainer: a --local run uses the devices this Python's torch sees "
            "(restrict them with CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES)"
        )
    hub_id, model_dir = resolve_model(request.model)
    data = check_data(request.data)
    out_dir = check_out_dir(request.out_dir)
    model_arg = str(model_dir) if model_dir else hub_id
    argv = [
        sys.executable,
        "-m",
        "workload",
        *workload_args(request, model_arg, str(data) if data else None, str(out_dir)),
    ]
    console.print(escape(f"running locally: {' '.join(argv[1:])}; output -> {out_dir}"))
    started = time.time()
    failure_class, failure = None, ""
    code, bad_input = None, None
    with contextlib.ExitStack() as stopping:
        with open(out_dir / WORKLOAD_LOG, "w", encoding="utf-8", buffering=1) as log:
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1
            )
            try:
                bad_input = _tee(proc, log)
                code = proc.wait()
                if code != 0 and not (code == WORKLOAD_BAD_INPUT and bad_input):
                    failure_class, failure = _exit_failure(code)
            except KeyboardInterrupt as exc:
                stopping.enter_context(later_ctrl_c_ignored())  # until the interrupted result is returned
                how = describe(exc)
                failure_class, failure = "interrupted", f"the run was interrupted ({how})"
                log.write(f"\n# envbuild: interrupted ({how}); stopping the workload\n")
                _stop(proc, signal.SIGTERM if isinstance(exc, Terminated) else None)
                _tee(proc, log)
        if code == WORKLOAD_BAD_INPUT and bad_input:  # refused input: no result, no log kept, nothing recorded
            (out_dir / WORKLOAD_LOG).unlink(missing_ok=True)
            raise BadWorkloadInput(bad_input)
        return RunEnd(
            out_dir,
            failure_class=failure_class,
            failure=failure,
            started=started,
            finished=time.time(),
            versions=local_versions(),
            host=host_record(host, site_recipes=request.site_recipes),
            image=None,
            invocation=envbuild_invocation(request, None),
        )


def _exit_failure(code: int) -> tuple[str, str]:
    """The error class of a non-zero exit: 2 is the workload refusing its arguments (usage_error)."""
    if code == 2:
        return "usage_error", f"the workload refused its arguments (exit code 2; see {WORKLOAD_LOG})"
    return "process_died", f"the workload exited with code {code}"


def _tee(proc: subprocess.Popen, log) -> str | None:
    """The workload's output to the log and this terminal, line by line, until it closes; returns the
    message of its bad-input line, if it printed one."""
    bad_input = None
    for line in proc.stdout:
        log.write(line)
        sys.stdout.write(line)
        sys.stdout.flush()
        bad_input = input_error_line(line) or bad_input
    return bad_input


def _stop(proc: subprocess.Popen, forward: signal.Signals | None) -> None:
    """Let the workload write its `interrupted` result (a terminal's Ctrl-C reached it too; SIGTERM is
    forwarded; else send SIGINT), then kill it if it does not exit."""
    steps = ((forward, 20), (signal.SIGKILL, 10)) if forward else ((None, 2), (signal.SIGINT, 20), (signal.SIGKILL, 10))
    for action, wait_s in steps:
        if action is not None:
            proc.send_signal(action)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
