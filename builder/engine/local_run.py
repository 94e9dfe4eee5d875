"""Run the workload in this Python environment (`LocalRunner`, the route of `--local` when this Python has the
workload's packages), or in another Python on this host (`Interpreter`: the managed workload environment, a venv
envbuild did not build): its torch, on the device it finds (a GPU when it sees one, else the CPU); the run that works
without Docker."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from builder.engine.container import (
    WORKLOAD_BAD_INPUT,
    BadWorkloadInput,
    RunError,
    check_data,
    input_error_line,
    resolve_model,
    workload_args,
)
from builder.engine.doctor import host_record
from builder.engine.run_result import RunEnd, check_out_dir, envbuild_invocation, run_end
from builder.engine.runner import Notify, Output, RunRequest, Said
from builder.interrupt import Terminated, describe
from builder.paths import WORKLOAD_LOG

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


@dataclass(frozen=True)
class Interpreter:
    """Another Python on this host to run the workload in: its command (interpreter and flags), its whole
    environment and working folder, what is known of its stack without the workload (`versions`, for a run that
    leaves no result), the result's `environment` block, and the bounds of a run in it (None: unbounded)."""

    argv: tuple[str, ...]
    env: dict[str, str]
    versions: dict
    record: dict
    cwd: str | None = None
    time_limit_s: float | None = None
    output_limit_bytes: int | None = None
    notes: list[str] = field(default_factory=list)  # what happened to the bounds (filled during the run)


class LocalRunner:
    """The route of `--local` in this Python (envbuild installed with its workload extra): its own torch."""

    def run(self, request: RunRequest, notify: Notify) -> RunEnd:
        return run_local(request, notify)


def run_local(request: RunRequest, notify: Notify, interpreter: Interpreter | None = None) -> RunEnd:
    """`python -m workload train ...` as a subprocess of this interpreter (or of `interpreter`), its output to
    `notify` line by line; how it ended (the workflow completes its result)."""
    if interpreter is None:
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
        *(interpreter.argv if interpreter else (sys.executable,)),
        "-m",
        "workload",
        *workload_args(request, model_arg, str(data) if data else None, str(out_dir)),
    ]
    notify(Said(f"running locally: {' '.join(argv[1:])}; output -> {out_dir}"))
    started = time.time()
    failure_class, failure = None, ""
    code, bad_input = None, None
    with open(out_dir / WORKLOAD_LOG, "w", encoding="utf-8", buffering=1) as log:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            env=interpreter.env if interpreter else None,
            cwd=interpreter.cwd if interpreter else None,
        )
        limit = interpreter.time_limit_s if interpreter else None
        timer = threading.Timer(limit, _time_up, (proc, interpreter.notes)) if limit else None
        try:
            if timer:
                timer.start()
            bad_input = _tee(proc, log, notify, interpreter.output_limit_bytes if interpreter else None)
            code = proc.wait()
            if timer and interpreter.notes:
                failure_class, failure = "timeout", f"the workload ran past its {limit:.0f} s and was stopped"
            elif code != 0 and not (code == WORKLOAD_BAD_INPUT and bad_input):
                failure_class, failure = _exit_failure(code)
        except KeyboardInterrupt as exc:
            how = describe(exc)
            failure_class, failure = "interrupted", f"the run was interrupted ({how})"
            log.write(f"\n# envbuild: interrupted ({how}); stopping the workload\n")
            _stop_local_workload(proc, signal.SIGTERM if isinstance(exc, Terminated) else None)
            _tee(proc, log, notify, interpreter.output_limit_bytes if interpreter else None)
        finally:
            if timer:
                timer.cancel()
    if code == WORKLOAD_BAD_INPUT and bad_input:  # refused input: no result, no log kept, nothing recorded
        (out_dir / WORKLOAD_LOG).unlink(missing_ok=True)
        raise BadWorkloadInput(bad_input)
    return run_end(
        out_dir,
        failure_class,
        failure,
        started,
        versions=interpreter.versions if interpreter else local_versions(),
        host=host_record(site_recipes=request.site_recipes),
        invocation=envbuild_invocation(request, None),
        environment=interpreter.record if interpreter else {"route": "envbuild-python"},
    )


def _exit_failure(code: int) -> tuple[str, str]:
    """The error class of a non-zero exit: 2 is the workload refusing its arguments (usage_error)."""
    if code == 2:
        return "usage_error", f"the workload refused its arguments (exit code 2; see {WORKLOAD_LOG})"
    return "process_died", f"the workload exited with code {code}"


def _tee(proc: subprocess.Popen, log, notify: Notify, limit: int | None = None) -> str | None:
    """The workload's output to the log and to `notify` (Output, `here`), line by line, until it closes; returns the
    message of its bad-input line, if it printed one. With `limit`, lines are cut at 64 KiB and nothing past `limit`
    characters is kept or shown (the rest is read and dropped, and the log says so)."""
    bad_input, written = None, 0
    for line in iter(lambda: proc.stdout.readline(65536 if limit else -1), ""):
        if limit is not None:
            written += len(line)
            if written > limit:
                if written - len(line) <= limit:
                    log.write(f"\n# envbuild: the output passed {limit} characters; the rest was dropped\n")
                continue
        log.write(line)
        notify(Output(line, here=True))
        bad_input = input_error_line(line) or bad_input
    return bad_input


def _time_up(proc: subprocess.Popen, notes: list[str]) -> None:
    """The run's time limit passed: note it and kill the workload (its output then closes)."""
    notes.append("time limit")
    try:
        proc.kill()
    except OSError:
        pass


def _stop_local_workload(proc: subprocess.Popen, forward: signal.Signals | None) -> None:
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
