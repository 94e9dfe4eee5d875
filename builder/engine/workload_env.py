"""The managed workload environment of `run workload --local` when envbuild runs without the workload's packages (a
`pipx install envbuild`): a venv under the user's cache, made once per recipe cell and what it is made from
(builder.plan.torch_choice.EnvChoice), with uv, in the order an image's torch stage installs it:

1. `uv venv` with the cell's Python (the one running envbuild when it is that version, else one uv finds or fetches);
2. the pip-ROCm route's accelerator wheels (`rocm[libraries,device-<gfx>]`, AMD's `amd-torch-device-<gfx>`), from the
   torch index only;
3. torch by exact version from its index, without its dependencies, checked against the sha256 the recipes record
   where they record one (recipes/wheel-hashes.toml: the CPU wheels);
4. the lock's [stack] (recipes/locks/), hash-checked, without dependencies: the HF stack and torch's own
   requirements, exactly as the cell's image has them;
5. what torch still needs that only its index has (e.g. triton-rocm), with torch held; then `uv pip check`.

The torch steps ask the torch index only (`--no-config`, no UV_* index variables): PyPI's `rocm-sdk-*` names are
placeholders and must never win. ENVBUILD_TORCH_INDEX_URL names a mirror of that index (a URL, or a folder of wheels);
the hash check is the same. Nothing here prints: `notify` gets one line per step and uv's own lines.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from builder.engine.container import RunError
from builder.plan.lock import uv_binary
from builder.plan.torch_choice import EnvChoice

MIRROR_VAR = "ENVBUILD_TORCH_INDEX_URL"
MARKER = ".envbuild-env.json"
STEP_TIMEOUT_S = 3600  # a ROCm or CUDA torch is several GB to download
#: uv settings that would send the torch steps to another index than the cell's (or to uv's own torch table)
_INDEX_VARS = (
    "UV_INDEX",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "UV_TORCH_BACKEND",
)


class WorkloadEnvError(RunError):
    """The managed environment could not be made (an index out of reach, no such Python): nothing was measured."""


@dataclass(frozen=True)
class ManagedEnv:
    root: Path
    choice: EnvChoice
    python_version: str  # the env's CPython, "3.11.7"
    from_mirror: bool  # torch came from ENVBUILD_TORCH_INDEX_URL, a mirror of choice.index_url
    made: bool  # made by this call (False: reused from the cache)

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def record(self) -> dict:
        """The result's `environment` block for a run in it (no path of this machine)."""
        return {
            "route": "managed",
            **self.choice.record(),
            "from_mirror": self.from_mirror,
            "python": self.python_version,
        }


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envbuild" / "workload-envs"


def mirror(environ: dict[str, str] | None = None) -> str | None:
    """ENVBUILD_TORCH_INDEX_URL: an http(s) or file URL of a mirror of the torch index, or a folder of wheels."""
    value = (os.environ if environ is None else environ).get(MIRROR_VAR, "").strip()
    if not value:
        return None
    if not re.fullmatch(r"(https?|file)://[^\s]+|/[^\s]*", value) or len(value) > 2000:
        raise WorkloadEnvError(
            f"{MIRROR_VAR}={value[:80]!r}: give an http(s):// or file:// URL of a torch index, or an absolute folder "
            "of wheels"
        )
    return value


def ensure(
    choice: EnvChoice, notify: Callable[[str], None] = lambda line: None, environ: dict[str, str] | None = None
) -> ManagedEnv:
    """The environment of `choice`, from the cache or made now (one maker at a time per environment: a second
    envbuild waits); WorkloadEnvError naming the step, the index and uv's last lines when it cannot be made."""
    environ = dict(os.environ if environ is None else environ)
    root = cache_root() / choice.folder_name
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        lock = open(root.parent / f"{choice.folder_name}.lock", "w")
    except OSError as exc:
        raise WorkloadEnvError(
            f"cannot keep the workload environment under {root.parent} ({exc.strerror or exc}): set XDG_CACHE_HOME "
            "to a folder you can write"
        ) from None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            notify(f"waiting for another envbuild that is making {root}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        marker = _ready(root, choice)
        made = marker is None
        if marker:
            notify(f"workload environment: {root} (cached; {choice.cell}, {choice.torch_requirement})")
        else:
            shutil.rmtree(root, ignore_errors=True)
            try:
                marker = _make(root, choice, notify, environ)
            except BaseException:
                shutil.rmtree(root, ignore_errors=True)  # never a half-made environment in the cache
                raise
        return ManagedEnv(root, choice, str(marker["python"]), marker.get("from_mirror") is True, made)


def _ready(root: Path, choice: EnvChoice) -> dict | None:
    """The marker of the finished environment of exactly `choice` in `root`, else None."""
    try:
        marker = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(marker, dict) and marker.get("digest") == choice.digest and (root / "bin" / "python").exists()
    return marker if ok else None


def _make(root: Path, choice: EnvChoice, notify: Callable[[str], None], environ: dict[str, str]) -> dict:
    started = time.monotonic()
    index = mirror(environ) or choice.index_url
    source = ["--no-index", "--find-links", index] if index.startswith("/") else ["--index-url", index]
    torch_env = {k: v for k, v in environ.items() if k not in _INDEX_VARS}
    notify(
        f"making the workload environment (once; cached in {root}): {choice.cell}, {choice.reason}; torch from {index}"
    )
    python = sys.executable if _python_line(sys.version_info) == choice.python else choice.python
    _uv(["venv", "--quiet", "--no-project", "--python", python, str(root)], "a venv", choice, index, notify, environ)
    target = ["--python", str(root / "bin" / "python")]
    with tempfile.TemporaryDirectory(prefix="envbuild-env-") as tmp:
        if choice.accel_requirements:
            notify(f"  accelerator wheels: {' '.join(choice.accel_requirements)}")
            args = ["pip", "install", "--no-config", *target, *source, *choice.accel_requirements]
            _uv(args, "the accelerator wheels", choice, index, notify, torch_env)
        torch_args = ["pip", "install", "--no-config", "--no-deps", *target, *source]
        if choice.torch_hashes:
            pinned = Path(tmp) / "torch.txt"
            pinned.write_text(
                " \\\n    ".join([choice.torch_requirement, *(f"--hash=sha256:{h}" for h in choice.torch_hashes)])
            )
            torch_args += ["--require-hashes", "-r", str(pinned)]
            notify(f"  {choice.torch_requirement} (checked against {len(choice.torch_hashes)} recorded sha256)")
        else:
            torch_args.append(choice.torch_requirement)
            notify(f"  {choice.torch_requirement} (no sha256 recorded for it: by exact version from its index)")
        _uv(torch_args, "torch", choice, index, notify, torch_env)
        stack = Path(tmp) / "stack.txt"
        stack.write_text(choice.stack)
        notify(f"  the locked stack, recipes/locks/{choice.lock}.txt (hash-checked)")
        _uv(
            ["pip", "install", "--no-deps", "--require-hashes", *target, "-r", str(stack)],
            "the locked stack",
            choice,
            "PyPI",
            notify,
            environ,
        )
        version = _run_python(root, ["-c", "import platform; print(platform.python_version())"]).strip()
        held_torch, missing = torch_needs(root, version)
        if missing:
            held = Path(tmp) / "held.txt"
            held.write_text(f"torch=={held_torch}\n")
            notify(f"  from torch's index: {' '.join(missing)}")
            args = ["pip", "install", "--no-config", *target, *source, "--constraint", str(held), *missing]
            _uv(args, "torch's own requirements", choice, index, notify, torch_env)
    _uv(["pip", "check", *target], "the check of the environment", choice, index, notify, environ)
    marker = {
        "digest": choice.digest,
        "python": version,
        "made_at": time.time(),
        "from_mirror": index != choice.index_url,
        **choice.record(),
    }
    (root / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    notify(f"workload environment ready in {time.monotonic() - started:.0f} s: {root}")
    return marker


def torch_needs(root: Path, python_version: str) -> tuple[str, list[str]]:
    """(torch's installed version, its requirements for this environment that are not installed yet), read from the
    environment's metadata here (its Python runs nothing): the markers are evaluated for its Python."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    sites = [str(p) for p in root.glob("lib/python3*/site-packages")]
    found = {_canonical(d.metadata["Name"] or ""): d for d in importlib.metadata.distributions(path=sites)}
    installed, torch = set(found), found.get("torch")
    if torch is None:
        raise WorkloadEnvError(f"the workload environment {root} has no torch after its install")
    short = ".".join(python_version.split(".")[:2])
    marker_env = {**default_environment(), "python_version": short, "python_full_version": python_version, "extra": ""}
    missing = []
    for text in torch.requires or []:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate(marker_env):
            continue
        if _canonical(requirement.name) not in installed:
            missing.append(str(requirement))
    return torch.version, missing


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _python_line(version_info) -> str:
    return f"{version_info[0]}.{version_info[1]}"


def _uv(args: list[str], what: str, choice: EnvChoice, index: str, notify, environ: dict[str, str]) -> None:
    """Run uv, its lines to `notify`; WorkloadEnvError naming `what`, the index and uv's last lines on failure."""
    tail: list[str] = []
    try:
        proc = subprocess.Popen(
            [uv_binary(WorkloadEnvError, "the workload environment is made"), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env={**environ, "UV_NO_PROGRESS": "1"},
        )
    except OSError as exc:
        raise WorkloadEnvError(f"cannot run uv for {what}: {exc}") from exc
    deadline = time.monotonic() + STEP_TIMEOUT_S
    with contextlib.closing(proc.stdout):
        for line in proc.stdout:
            line = line.rstrip()[:500]
            if line:
                tail = (tail + [line])[-8:]
                notify(f"    {line}")
            if time.monotonic() > deadline:
                proc.kill()
                break
    code = proc.wait()
    if code != 0:
        hint = (
            f"; reach it, or set {MIRROR_VAR} to a mirror of it or to a folder holding the wheels"
            if index != "PyPI"
            else ""
        )
        raise WorkloadEnvError(
            f"could not make the workload environment of {choice.cell}: {what} failed (uv exit {code}; index {index}"
            f"{hint}):\n" + "\n".join(tail)
        )


def _run_python(root: Path, args: list[str]) -> str:
    proc = subprocess.run(
        [str(root / "bin" / "python"), "-I", *args], capture_output=True, text=True, timeout=300, check=False
    )
    if proc.returncode != 0:
        raise WorkloadEnvError(
            f"the workload environment's Python failed: {(proc.stderr or proc.stdout).strip()[-500:]}"
        )
    return proc.stdout
