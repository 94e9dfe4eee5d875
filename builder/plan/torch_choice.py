"""Which recipe cell's torch a managed workload environment gets on this host (`run workload --local` without the
workload's packages): the same wheel, index, accelerator wheels and locked stack as that cell's image.

The candidates are the recipe cells of the host's accelerator that take torch from an official wheel and have their
lock: the CPU cell on a CPU box; on an AMD host the cells of its GPU's arch (PyTorch's ROCm index, or the pip-ROCm
route of ROCm 7.14 and 10.0: `rocm[libraries,device-<gfx>]` and, for 10.0, AMD's split `amd-torch-device-<gfx>`); on
an NVIDIA host the CUDA cells. Among them: the newest torch line, then a cell whose Python is the one running envbuild
(no interpreter to fetch), then PyTorch's own build (download.pytorch.org) before AMD's, then torch's own ROCm
before the pip-ROCm route, then the newest release (CUDA: the arch a request without --arch gets; the cell a run
lands in follows the GPU that ran). A route named by ENVBUILD_TORCH_BACKEND (`rocm7.14`) keeps only its release's
cells.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

from builder.plan import lock as lockfile
from builder.plan.recipes import Recipes, version_key
from builder.plan.resolve import Plan, Request, all_plans, resolve

#: Bumped when the way an environment is made changes: every cached one is made again.
FORMAT = 1
PYTORCH_INDEX = "https://download.pytorch.org/whl/"


class NoTorchForHost(ValueError):
    """No recipe cell fits this host's accelerator (an arch no release lists, a route that does not exist)."""


@dataclass(frozen=True)
class EnvChoice:
    """Everything a managed environment is made from; equal choices make equal environments (`digest`)."""

    cell: str  # the recipe cell whose torch and stack it gets ("cpu-torch2.13-py3.11")
    python: str  # the cell's Python line ("3.11")
    torch_requirement: str  # "torch==2.13.0+cpu"
    torch_hashes: tuple[str, ...]  # the sha256 recipes/wheel-hashes.toml records for this Python's wheels; () = none
    index_url: str  # where torch (and the accelerator wheels, and what torch needs from its index) come from
    accel_requirements: tuple[str, ...]  # the pip-ROCm route's SDK (and AMD's device torch) wheels, one arch only
    from_torch_index: tuple[str, ...]  # the lock's names that only the torch index has (never from the lock)
    lock: str  # the lock key ("torch2.13-py3.11")
    lock_sha256: str  # what the lock pins (builder.plan.lock.Lock.sha256)
    stack: str = field(repr=False)  # the lock's [stack] as a hash-checked requirements file, torch and
    # from_torch_index left out
    reason: str  # why this cell, in one line

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps({"format": FORMAT, **asdict(self)}, sort_keys=True).encode()).hexdigest()

    @property
    def folder_name(self) -> str:
        """The cache folder's name: the cell and what the environment is made from."""
        return f"{self.cell}-{self.digest[:12]}"

    @property
    def torch_version(self) -> str:
        return self.torch_requirement.removeprefix("torch==")

    def record(self) -> dict:
        """What a result records of the environment (its `environment` block)."""
        return {
            "cell": self.cell,
            "torch": self.torch_requirement,
            "torch_sha256": list(self.torch_hashes) or "unhashed",
            "index": self.index_url,
            "accelerator_wheels": list(self.accel_requirements),
            "lock": self.lock,
            "lock_sha256": self.lock_sha256,
            "reason": self.reason,
        }


def choose(recipes: Recipes, kind: str, arch: str | None, running_python: str, release: str | None = None) -> EnvChoice:
    """The environment for a host with accelerator `kind` (cpu, rocm, cuda) and `arch` (an AMD GPU's gfx target),
    envbuild running on Python `running_python` ("3.11"); `release` keeps one route ("7.14"). NoTorchForHost when no
    recipe cell fits."""
    plans = [
        p
        for p in all_plans(recipes, flavor=kind)
        if p.torch_source == "wheel"
        and p.wheel_index_url
        and (kind != "rocm" or p.cell.arch == arch)
        and (release is None or p.release.version == release)
        and p.lock_path.is_file()
    ]
    if not plans:
        raise NoTorchForHost(_none_fit(recipes, kind, arch, release))

    def preference(plan: Plan) -> tuple:
        return (
            version_key(plan.cell.torch),
            plan.cell.python == running_python,
            plan.wheel_index_url.startswith(PYTORCH_INDEX),  # PyTorch's own build before AMD's (ROCm 10)
            plan.accel_wheels is None,  # then torch's own ROCm before the SDK as wheels (the pip-ROCm route)
            version_key(plan.release.version),
        )

    best = max(plans, key=preference)
    if arch is None and best.cell.arch is not None:  # CUDA: one wheel for every arch, the cell of a request without one
        request = Request(
            flavor=kind,
            accel_version=best.release.version,
            torch=best.cell.torch,
            python=best.cell.python,
            torch_source="wheel",
        )
        best = resolve(request, recipes)
    return _choice(best, recipes, kind, arch, release, running_python)


def _choice(plan: Plan, recipes: Recipes, kind: str, arch: str | None, release: str | None, running: str) -> EnvChoice:
    lock = lockfile.for_plan(plan)
    from_index = tuple(lock.from_torch_index)
    stack = lock.requirements("stack", {e.name for e in lock.entries("stack")} - set(from_index) - {"torch"})
    accel = tuple(plan.accel_wheels["requirements"]) if plan.accel_wheels else ()
    route = ("the pip-ROCm route, " if accel else "") + (
        "PyTorch's index" if plan.wheel_index_url.startswith(PYTORCH_INDEX) else "AMD's index"
    )
    why = {
        "cpu": "no GPU on this host: the CPU cell",
        "rocm": f"the newest torch line with an official wheel for {arch}, from {route}",
        "cuda": "the newest torch line with an official CUDA wheel",
    }[kind]
    if release:
        why += f" (the {plan.flavor.label} {release} route asked for)"
    if plan.cell.python != running:
        why += f"; Python {plan.cell.python}, the cell's (envbuild runs on {running})"
    return EnvChoice(
        cell=plan.cell.key,
        python=plan.cell.python,
        torch_requirement=plan.torch_requirement,
        torch_hashes=tuple(plan.wheel_hashes.values()),
        index_url=plan.wheel_index_url,
        accel_requirements=accel,
        from_torch_index=from_index,
        lock=lock.key,
        lock_sha256=lock.sha256,
        stack=stack,
        reason=why,
    )


def _none_fit(recipes: Recipes, kind: str, arch: str | None, release: str | None) -> str:
    if kind == "rocm":
        known = sorted({c.arch for p in all_plans(recipes, flavor="rocm") for c in [p.cell] if c.arch})
        where = f" for ROCm {release}" if release else ""
        return (
            f"no recipe cell has an official torch wheel for {arch}{where} (the recipes know {', '.join(known)}); "
            "measure a torch you have with --venv PATH or in an image (--image, --apptainer)"
        )
    label = {"cpu": "the CPU", "cuda": "CUDA"}[kind]
    where = f" {release}" if release else ""
    return f"no recipe cell takes an official torch wheel for {label}{where} with its lock (recipes/locks/)"
