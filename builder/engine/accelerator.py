"""Which accelerator this host has, for the torch of `run workload --local`'s managed environment.

Read in the order uv's `--torch-backend=auto` reads it (astral-sh/uv crates/uv-torch/src/accelerator.rs
@11f49f2ec5a3e2ffaa75995b407cfc03c1f7cdca, `Accelerator::detect`): the NVIDIA driver's version from
/sys/module/nvidia/version, then /proc/driver/nvidia/version; then the AMD GPU's LLVM target from
`rocm_agent_enumerator` on PATH (astral-sh/uv#14176), and, where that tool is missing (a host with the amdgpu
driver and no ROCm userspace: the pip-ROCm route's hosts), from the KFD topology the doctor reads. Nothing found:
the CPU. `ENVBUILD_TORCH_BACKEND` overrides it: `cpu`, or a route the recipes know (`rocm7.2`, `rocm7.14`,
`cuda13.0`) whose arch is still detected. uv's detection is followed, its index table is not: the recipes choose
the index (builder.plan.torch_choice).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from builder.engine.doctor import HostView, kfd_gpus

ENV_VAR = "ENVBUILD_TORCH_BACKEND"
#: `auto`, `cpu`, or a flavor and release of the recipes: the value becomes a recipe lookup, never a path or argv.
BACKEND = re.compile(r"(auto|cpu|rocm[0-9]+(\.[0-9]+){0,2}|cuda[0-9]+\.[0-9]+)")
_GFX = re.compile(r"gfx[0-9a-f]{3,5}")
_DRIVER = re.compile(r"[0-9]+(\.[0-9]+){1,3}")
ENUMERATOR_TIMEOUT_S = 20


class BackendError(ValueError):
    """ENVBUILD_TORCH_BACKEND holds something that is no backend."""


@dataclass(frozen=True)
class Accelerator:
    """What the host has: `kind` cpu, rocm or cuda; the AMD GPU's target (`arch`) or the NVIDIA driver version;
    `seen`: where it was read (shown to the user and recorded); `release`: a route ENVBUILD_TORCH_BACKEND asked for."""

    kind: str
    seen: str
    arch: str | None = None
    driver: str | None = None
    release: str | None = None

    def describe(self) -> str:
        what = {"cpu": "no GPU", "rocm": f"an AMD GPU ({self.arch})", "cuda": f"an NVIDIA GPU (driver {self.driver})"}
        return f"{what[self.kind]}, from {self.seen}"


def requested(environ: dict[str, str] | None = None) -> str:
    """ENVBUILD_TORCH_BACKEND (default auto); BackendError for anything else than its grammar."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, "auto").strip() or "auto"
    if not BACKEND.fullmatch(value):
        raise BackendError(
            f"{ENV_VAR}={value[:60]!r} is no torch backend: use auto (the default: detect the GPU), cpu, or a route "
            "of the recipes such as rocm7.2, rocm7.14 or cuda13.0"
        )
    return value


def detect(host: HostView | None = None, environ: dict[str, str] | None = None) -> Accelerator:
    """The host's accelerator, or the one ENVBUILD_TORCH_BACKEND names (its arch still read from the host)."""
    host = host or HostView()
    backend = requested(environ)
    if backend == "cpu":
        return Accelerator("cpu", f"{ENV_VAR}=cpu")
    found = _nvidia(host) or _amd(host, environ) or Accelerator("cpu", "no NVIDIA driver, no AMD GPU found")
    if backend == "auto":
        return found
    kind, release = re.fullmatch(r"([a-z]+)(.*)", backend).groups()
    if found.kind != kind:
        raise BackendError(f"{ENV_VAR}={backend}: this host has {found.describe()}, not a {kind} GPU")
    return Accelerator(found.kind, f"{found.seen}; {ENV_VAR}={backend}", found.arch, found.driver, release)


def _nvidia(host: HostView) -> Accelerator | None:
    module = host.read("/sys/module/nvidia/version")
    if module and _DRIVER.fullmatch(module):
        return Accelerator("cuda", "/sys/module/nvidia/version", driver=module)
    proc = host.read("/proc/driver/nvidia/version") or ""
    # "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.144.03  Release Build ..." (two spaces around it)
    parts = proc.splitlines()[0].split("  ") if proc else []
    if len(parts) > 1 and _DRIVER.fullmatch(parts[1].strip()):
        return Accelerator("cuda", "/proc/driver/nvidia/version", driver=parts[1].strip())
    return None


def _amd(host: HostView, environ: dict[str, str] | None) -> Accelerator | None:
    if host.is_real_root:
        path = (os.environ if environ is None else environ).get("PATH", os.defpath)
        tool = shutil.which("rocm_agent_enumerator", path=path)
        if tool:
            archs = _enumerated(tool)
            if archs:
                return Accelerator("rocm", f"rocm_agent_enumerator ({', '.join(archs)})", arch=archs[0])
    gpus = kfd_gpus(host)
    if gpus:
        archs = list(dict.fromkeys(g.arch for g in gpus))
        return Accelerator("rocm", f"the KFD topology ({', '.join(archs)})", arch=archs[0])
    return None


def _enumerated(tool: str) -> list[str]:
    """The GPU targets `rocm_agent_enumerator` lists, first GPU first (gfx000 is the CPU agent); [] when it fails."""
    try:
        proc = subprocess.run([tool], capture_output=True, text=True, timeout=ENUMERATOR_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if proc.returncode != 0:
        return []
    lines = [line.strip() for line in proc.stdout.splitlines()[:256]]
    return list(dict.fromkeys(line for line in lines if _GFX.fullmatch(line) and line != "gfx000"))
