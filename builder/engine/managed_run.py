"""`run workload --local` when envbuild runs without the workload's packages (a `pipx install envbuild`): the run takes
the managed workload environment, the recipe cell's torch for this host's accelerator (detected as uv's
`--torch-backend=auto` does; builder.engine.accelerator), made once with uv under the user's cache
(builder.engine.workload_env), with a read-only copy of workload/ on its path."""

from __future__ import annotations

import os
import platform
import tempfile
from pathlib import Path
from typing import Callable

from builder.engine import accelerator, workload_env
from builder.engine.container import RunError
from builder.engine.doctor import HostView
from builder.engine.foreign import copy_workload, remove_work
from builder.engine.local_run import Interpreter, run_local
from builder.engine.run_result import RunEnd
from builder.engine.runner import Notify, RunRequest
from builder.plan import recipes, torch_choice


class ManagedRunner:
    """The route of `--local` in envbuild's own environment for this host (this Python lacks the workload's
    packages); the environment's lines go to `notify` as plain lines."""

    def run(self, request: RunRequest, notify: Notify) -> RunEnd:
        env = managed_environment(request.site_recipes, notify)
        work = Path(tempfile.mkdtemp(prefix="envbuild-run-"))
        try:
            src = copy_workload(work)
            interpreter = Interpreter(
                argv=(str(env.python),),
                env={**os.environ, "PYTHONPATH": str(src), "PYTHONNOUSERSITE": "1"},
                versions={"python": env.python_version, "torch": env.choice.torch_version},
                record=env.record(),
            )
            return run_local(request, notify, interpreter=interpreter)
        finally:
            remove_work(work)


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
