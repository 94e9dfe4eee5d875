"""Run the workload in this Python environment (CPU, tiny model): the run that works without Docker or a GPU."""

from __future__ import annotations

import importlib.metadata
import platform
import signal
import subprocess
import sys
import time

from rich.console import Console
from rich.markup import escape

from builder.container import (WORKLOAD_BAD_INPUT, BadWorkloadInput, RunError, RunRequest, check_data,
                               input_error_line, resolve_model, workload_args)
from builder.doctor import HostView, host_record
from builder.run_result import check_out_dir, finalize

_DISTRIBUTIONS = {"torch": "torch", "transformers": "transformers", "peft": "peft", "accelerate": "accelerate",
                  "sentencepiece": "sentencepiece", "safetensors": "safetensors", "numpy": "numpy"}


def local_versions() -> dict:
    """Versions of this interpreter's stack (for the envelope of a run that left no result)."""
    versions = {"python": platform.python_version()}
    for key, dist in _DISTRIBUTIONS.items():
        try:
            versions[key] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[key] = None
    return versions


def run_local(request: RunRequest, console: Console | None = None, host: HostView | None = None) -> dict:
    """`python -m workload train ...` as a subprocess of this interpreter; collect and complete its result."""
    console = console or Console(stderr=True, soft_wrap=True)
    if request.gpus:
        raise RunError("--gpus needs --image: a --local run uses this machine's CPU")
    hub_id, model_dir = resolve_model(request.model)
    data = check_data(request.data)
    out_dir = check_out_dir(request.out_dir)
    model_arg = str(model_dir) if model_dir else hub_id
    argv = [sys.executable, "-m", "workload",
            *workload_args(request, model_arg, str(data) if data else None, str(out_dir))]
    console.print(escape(f"running locally: {' '.join(argv[1:])}; output -> {out_dir}"))
    started = time.time()
    failure_class, failure = None, ""
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, errors="replace")
    bad_input = None
    try:
        for line in proc.stderr:  # passed through; the workload's bad-input line is kept for the message
            sys.stderr.write(line)
            bad_input = input_error_line(line) or bad_input
        code = proc.wait()
        if code == WORKLOAD_BAD_INPUT and bad_input:
            raise BadWorkloadInput(bad_input)
        if code != 0:
            failure_class, failure = "process_died", f"the workload exited with code {code}"
    except KeyboardInterrupt:
        failure_class, failure = "interrupted", "the run was interrupted (Ctrl-C)"
        _stop(proc)
    return finalize(out_dir, failure_class=failure_class, failure=failure, started=started,
                    finished=time.time(), versions=local_versions(), host=host_record(host), image=None)


def _stop(proc: subprocess.Popen) -> None:
    """Let the workload write its `interrupted` result (a terminal's Ctrl-C reached it too; else send
    SIGINT), then kill it if it does not exit."""
    for action, wait_s in ((None, 2), (signal.SIGINT, 20), (signal.SIGKILL, 10)):
        if action is not None:
            proc.send_signal(action)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
