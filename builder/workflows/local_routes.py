"""Where a run on this host runs (`run workload --local`, `--venv PATH`, `--local --python PATH`):

- the Python envbuild runs in, when it has the workload's packages (`envbuild[workload]` in your own venv);
- else the managed workload environment: the recipe cell's torch for this host's accelerator (detected as uv's
  `--torch-backend=auto` does; builder.engine.accelerator), made once with uv under the user's cache
  (builder.engine.workload_env);
- with `--venv`, a Python environment envbuild did not build, measured as it is (builder.engine.venv_route); its
  result is checked against what the host read of its files.
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from builder.engine import accelerator, venv_route, workload_env
from builder.engine.container import RunError, RunRequest
from builder.engine.doctor import HostView
from builder.engine.local_run import Interpreter, MissingWorkloadPackages, check_workload_packages, run_local
from builder.engine.run_result import RunEnd
from builder.plan import recipes, torch_choice


def run_here(request: RunRequest, console, notify: Callable[[str], None], venv: Path | None = None, wheels=None):
    """Run the workload on this host; returns (RunEnd, a check of the result, or None). The check takes the final
    result and says how it contradicts what the host read (a `--venv` run), None when it does not."""
    if venv is not None:
        return _run_venv(request, console, notify, venv, wheels)
    try:
        check_workload_packages()
        return run_local(request, console), None  # envbuild[workload]: this Python, its own torch
    except MissingWorkloadPackages:
        pass
    env = managed_environment(request.site_recipes, notify)
    work = Path(tempfile.mkdtemp(prefix="envbuild-run-"))
    try:
        from builder.engine.foreign import copy_workload

        src = copy_workload(work)
        interpreter = Interpreter(
            argv=(str(env.python),),
            env={**os.environ, "PYTHONPATH": str(src), "PYTHONNOUSERSITE": "1"},
            versions={"python": env.python_version, "torch": env.choice.torch_version},
            record=env.record(),
        )
        return run_local(request, console, interpreter=interpreter), None
    finally:
        _remove(work)


def managed_environment(site_recipes: Path | None, notify: Callable[[str], None]) -> workload_env.ManagedEnv:
    """The managed workload environment for this host (made now, or from the cache); RunError (exit 2) when no recipe
    cell fits the host or it cannot be made."""
    try:
        found = accelerator.detect(HostView())
        running = ".".join(platform.python_version_tuple()[:2])
        choice = torch_choice.choose(recipes.load(site=site_recipes), found.kind, found.arch, running, found.release)
    except (accelerator.BackendError, torch_choice.NoTorchForHost) as exc:
        raise RunError(str(exc)) from None
    notify(
        f"this Python lacks the workload's packages: the workload runs in envbuild's own environment for this host "
        f"({found.describe()}): {choice.cell}"
    )
    return workload_env.ensure(choice, notify)


def _run_venv(request: RunRequest, console, notify, venv: Path, wheels) -> tuple[RunEnd, Callable]:
    python = venv_route.interpreter_path(venv, "--venv")
    work = Path(tempfile.mkdtemp(prefix="envbuild-venv-"))
    try:
        interpreter, facts, line = venv_route.prepare(python, request, work, wheels)
        notify(f"{python} was not made by envbuild: {line}")
        end = run_local(request, console, interpreter=interpreter)
    finally:
        _remove(work)
    if end.invocation:  # the command names the flag, never this machine's path
        command = end.invocation["envbuild"]
        at = command.index("--local")
        end.invocation["envbuild"] = [*command[:at], "--venv", "VENV", *command[at + 1 :]]
    return end, lambda result: venv_route.contradiction(result, facts)


def _remove(work: Path) -> None:
    for path in [work, *work.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(work, ignore_errors=True)
