"""Host preflight for GPU containers: kernel, amdgpu driver, device access, GPU archs, IOMMU, the host's ROCm
userspace (TheRock's /opt/rocm/core-<version> or the legacy /opt/rocm), Docker.

Containers share the host kernel and driver, so no image can fix what is checked here. Every file is
read below `root` so tests can point the checks at a fake /sys, /proc, /dev and /etc.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import stat
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from builder.engine.docker import EngineUnavailable, detect_build_tool, docker_client
from builder.plan import gpu_names, recipes
from workload.binaries import rocm_layout

PASS, WARN, FAIL = "pass", "warn", "fail"


def validated_kernels(loaded: recipes.Recipes) -> dict[str, tuple[str, ...]]:
    """ROCm release -> host kernel lines AMD validated for it (recipes/rocm.toml `host_kernels`, with sources)."""
    return {v: r.host_kernels for v, r in loaded.releases["rocm"].items() if r.host_kernels}


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # pass | warn | fail
    detail: str
    hint: str = ""


@dataclass(frozen=True)
class Gpu:
    """A GPU node of the KFD topology (`/sys/class/kfd/kfd/topology/nodes/<node>/properties`)."""

    node: int
    arch: str  # e.g. gfx90a
    render_minor: int | None  # N of /dev/dri/renderD<N>


@dataclass
class HostView:
    """Where the checks look: a filesystem root plus the identity whose device access is checked."""

    root: Path = Path("/")
    uid: int = field(default_factory=os.getuid)
    groups: tuple[int, ...] = field(default_factory=lambda: tuple(os.getgroups()) + (os.getgid(),))
    check_engine: bool = True

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def read(self, absolute: str) -> str | None:
        try:
            return self.path(absolute).read_text().strip()
        except OSError:
            return None

    @property
    def is_real_root(self) -> bool:
        return self.root.resolve() == Path("/")


def gfx_name(target_version: int) -> str:
    """KFD `gfx_target_version` -> LLVM target name: 90010 -> gfx90a, 90402 -> gfx942, 110000 -> gfx1100.

    major = v // 10000, minor = v // 100 % 100, stepping = v % 100; minor and stepping print as one hex
    digit each (ROCm rocprofiler-sdk names agents `gfx{major}{minor}{stepping:x}` the same way).
    """
    major, minor, stepping = target_version // 10000, target_version // 100 % 100, target_version % 100
    return f"gfx{major}{minor:x}{stepping:x}"


def kfd_gpus(host: HostView) -> list[Gpu]:
    """GPU nodes of the KFD topology (CPU nodes have gfx_target_version 0), ordered by node id."""
    nodes_dir = host.path("/sys/class/kfd/kfd/topology/nodes")
    gpus = []
    if not nodes_dir.is_dir():
        return gpus
    for node in sorted(nodes_dir.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1):
        try:
            props = dict(
                line.split(None, 1)
                for line in (node / "properties").read_text().splitlines()
                if len(line.split(None, 1)) == 2
            )
        except OSError:
            continue
        target = int(props.get("gfx_target_version", "0"))
        if target:
            minor = props.get("drm_render_minor")
            gpus.append(Gpu(int(node.name), gfx_name(target), int(minor) if minor else None))
    return gpus


def nvidia_gpus(host: HostView) -> list[str]:
    """The NVIDIA GPUs the driver shows (`/proc/driver/nvidia/gpus/<bus id>/information`, its `Model:` line), by
    bus id; a GPU whose model line is unreadable counts as "unknown model". The file's `Key: value` lines and its
    `Model` key: checked against lutris/lutris lutris/util/graphics/drivers.py@eb0ac36, which reads them; not run on
    an NVIDIA host here."""
    root = host.path("/proc/driver/nvidia/gpus")
    models = []
    for gpu in sorted(root.iterdir()) if root.is_dir() else []:
        info = host.read(f"/proc/driver/nvidia/gpus/{gpu.name}/information")
        found = re.search(r"^Model:\s*(\S.*?)\s*$", info or "", re.M)
        models.append(found[1][:200] if found else "unknown model")
    return models


def _check_kernel(host: HostView, loaded: recipes.Recipes) -> Check:
    release = host.read("/proc/sys/kernel/osrelease") or (platform.release() if host.is_real_root else None)
    if not release:
        return Check("kernel", WARN, "kernel release unknown (no /proc/sys/kernel/osrelease)")
    line = ".".join(release.split(".")[:2])
    validated = validated_kernels(loaded)
    ok = [rocm for rocm, lines in validated.items() if line in lines]
    if ok:
        return Check("kernel", PASS, f"{release} (a validated kernel line for ROCm {', '.join(ok)})")
    return Check(
        "kernel",
        WARN,
        f"{release}: not a kernel line AMD validated for ROCm "
        f"{', '.join(validated)} ({', '.join(sorted({k for v in validated.values() for k in v}))})",
        "containers share the host kernel: use a validated kernel (e.g. Ubuntu 22.04 5.15 GA) if GPU jobs misbehave",
    )


def _check_driver(host: HostView, gpu_expected: bool) -> Check:
    version = host.read("/sys/module/amdgpu/version")
    if version:
        return Check("amdgpu_driver", PASS, f"amdgpu-dkms {version}")
    if host.path("/sys/module/amdgpu").is_dir():
        return Check(
            "amdgpu_driver",
            WARN,
            "amdgpu loaded without a version (the kernel's in-tree driver)",
            "install amdgpu-dkms matching your ROCm release (amdgpu-install --usecase=dkms); "
            "driver and userspace are supported within about +-2 releases",
        )
    return Check(
        "amdgpu_driver",
        FAIL if gpu_expected else WARN,
        "no amdgpu kernel module loaded",
        "install the amdgpu-dkms driver (amdgpu-install --usecase=dkms) and reboot; "
        "without it only cpu images and --local runs work",
    )


def _device_access(host: HostView, path: Path) -> tuple[bool, str]:
    """Can the checked identity open `path` read-write? Returns (ok, owning group name)."""
    info = path.stat()
    group = _group_name(host, info.st_gid)
    if host.uid == 0:
        return True, group
    mode = info.st_mode
    ok = (
        (info.st_uid == host.uid and mode & stat.S_IRUSR and mode & stat.S_IWUSR)
        or (info.st_gid in host.groups and mode & stat.S_IRGRP and mode & stat.S_IWGRP)
        or (mode & stat.S_IROTH and mode & stat.S_IWOTH)
    )
    return bool(ok), group


def _group_name(host: HostView, gid: int) -> str:
    for line in (host.read("/etc/group") or "").splitlines():
        parts = line.split(":")
        if len(parts) >= 3 and parts[2] == str(gid):
            return parts[0]
    return str(gid)


def _check_devices(host: HostView, gpu_expected: bool) -> Check:
    kfd, dri = host.path("/dev/kfd"), host.path("/dev/dri")
    render_nodes = sorted(dri.glob("renderD*")) if dri.is_dir() else []
    if not kfd.exists() or not render_nodes:
        missing = [str(p) for p, ok in ((kfd, kfd.exists()), (dri / "renderD*", bool(render_nodes))) if not ok]
        return Check(
            "gpu_devices",
            FAIL if gpu_expected else WARN,
            f"missing {', '.join(missing)}",
            "load the amdgpu driver (modprobe amdgpu); in a VM pass the GPU through",
        )
    denied, groups = [], set()
    for node in (kfd, *render_nodes):
        ok, group = _device_access(host, node)
        groups.add(group)
        if not ok:
            denied.append(node.name)
    names = ",".join(sorted(groups))
    if denied:
        return Check(
            "gpu_devices",
            FAIL,
            f"no read-write access to {', '.join(denied)} (owned by group {names})",
            f"add yourself to the groups and log in again: sudo usermod -aG {names} $USER",
        )
    return Check("gpu_devices", PASS, f"/dev/kfd and {len(render_nodes)} render node(s) accessible (groups {names})")


def _check_archs(host: HostView, gpus: list[Gpu], gpu_expected: bool) -> Check:
    if gpus:
        archs = sorted({g.arch for g in gpus})
        return Check("gpu_archs", PASS, f"{len(gpus)} GPU(s): {', '.join(archs)} (KFD topology)")
    # rocminfo on PATH, else in a ROCm prefix: TheRock's /opt/rocm/core-<version>/bin is on no PATH after a tarball
    rocminfo = shutil.which("rocminfo") or rocm_layout.tool("rocminfo", host.root)
    if host.is_real_root and rocminfo:
        out = subprocess.run([str(rocminfo)], capture_output=True, text=True, timeout=60, check=False).stdout
        archs = sorted(set(re.findall(r"^\s*Name:\s+(gfx[0-9a-f]+)\s*$", out, re.M)))
        if archs:
            return Check("gpu_archs", PASS, f"{', '.join(archs)} (rocminfo)")
    return Check(
        "gpu_archs",
        FAIL if gpu_expected else WARN,
        "no GPU in /sys/class/kfd topology",
        "check the amdgpu driver (dmesg | grep -i amdgpu) and that the GPU is visible (lspci)",
    )


#: Installed packages of a ROCm userspace, by naming: TheRock's amdrocm-* (amdrocm-runtime, amdrocm-core-sdk10.1: the
#: transition guide, ROCm/rocm-docs docs/about/transition-guide-TheRock.md@9bcf25d) and the legacy meta package rocm-core.
_ROCM_PACKAGE = re.compile(r"amdrocm-[a-z0-9][a-z0-9.+-]*|rocm-core")


def rocm_packages(host: HostView) -> list[str]:
    """The ROCm packages dpkg lists as installed under the host's root (/var/lib/dpkg/status), by name."""
    status = host.read("/var/lib/dpkg/status") or ""
    found = []
    for stanza in status.split("\n\n"):
        fields = dict(re.findall(r"^(Package|Status): *(.*)$", stanza, re.M))
        name = fields.get("Package", "")
        if _ROCM_PACKAGE.fullmatch(name) and fields.get("Status", "").endswith(" installed"):
            found.append(name)
    return sorted(found)


def _check_rocm_userspace(host: HostView) -> Check:
    """The ROCm userspace installed on the host: TheRock's /opt/rocm/core-<version>, the legacy /opt/rocm, and their
    packages. Information only: an image brings its own userspace (`apptainer --rocm` binds some of the host's)."""
    found = rocm_layout.installs(host.root, env=dict(os.environ) if host.is_real_root else {})
    packages = rocm_packages(host)
    if not found and not packages:
        return Check("rocm_userspace", PASS, "none installed (not needed: every image brings its own ROCm userspace)")
    parts = [
        f"/{install.prefix.relative_to(host.root).as_posix()} "
        f"({install.version or 'version not readable'}, {'TheRock layout' if install.layout == 'core' else 'legacy'})"
        for install in found
    ]
    therock = [p for p in packages if p.startswith("amdrocm-")]
    if therock:
        parts.append(
            f"{len(therock)} amdrocm-* packages ({', '.join(therock[:4])}{', ...' if len(therock) > 4 else ''})"
        )
    if "rocm-core" in packages:
        parts.append("legacy packages (rocm-core)")
    return Check("rocm_userspace", PASS, "; ".join(parts))


def runnable_cells(archs: list[str], kernel: str | None, loaded: recipes.Recipes) -> dict[str, list[dict]]:
    """Per host GPU arch, the ROCm releases with cells for it and their torch lines (the recipes `loaded`, via the
    resolver's known cells), each marked whether AMD validated the host's kernel line for that release ("" = not
    listed)."""
    from builder.plan.resolve import all_plans

    line = ".".join(kernel.split(".")[:2]) if kernel else ""
    found: dict[str, dict[str, set[str]]] = {arch: {} for arch in archs}
    for plan in all_plans(loaded, "rocm"):
        if plan.cell.arch in found:
            found[plan.cell.arch].setdefault(plan.release.version, set()).add(plan.torch.line)
    releases = loaded.releases["rocm"]
    return {
        arch: [
            {
                "rocm": version,
                "torch": sorted(lines, key=recipes.version_key),
                "kernel_validated": (line in releases[version].host_kernels)
                if releases[version].host_kernels
                else None,
            }
            for version, lines in sorted(by.items(), key=lambda kv: recipes.version_key(kv[0]))
        ]
        for arch, by in found.items()
    }


def _check_cells(archs: list[str], cells: dict[str, list[dict]]) -> Check:
    if not archs:
        return Check("cells", WARN, "no GPU arch found: only cpu cells (and --local) can run here")
    parts, missing = [], [arch for arch in archs if not cells.get(arch)]
    for arch in archs:
        names = gpu_names.marketing_names(arch)
        runs = ", ".join(f"ROCm {c['rocm']} (torch {', '.join(c['torch'])})" for c in cells.get(arch, []))
        parts.append(f"{arch}{' (' + ', '.join(names) + ')' if names else ''}: {runs or 'no known cell'}")
    if missing:
        return Check(
            "cells",
            WARN,
            "; ".join(parts),
            f"no recipe covers {', '.join(missing)}: "
            "`envbuild recipes list` shows the archs each ROCm release supports",
        )
    return Check("cells", PASS, "; ".join(parts))


def _check_iommu(host: HostView, gpus: list[Gpu]) -> Check:
    cmdline = (host.read("/proc/cmdline") or "").split()
    if len(gpus) < 2:
        return Check("iommu", PASS, f"{len(gpus)} GPU(s): iommu=pt not needed")
    if "iommu=pt" in cmdline:
        return Check("iommu", PASS, f"{len(gpus)} GPUs and iommu=pt set")
    return Check(
        "iommu",
        WARN,
        f"{len(gpus)} GPUs but no iommu=pt on the kernel command line (RCCL collectives can hang: ROCm/rccl#1129)",
        "add iommu=pt to GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, run update-grub, reboot",
    )


def _check_engine() -> tuple[Check, Check, dict]:
    try:
        version = docker_client(timeout=10).version()
        engine = Check(
            "docker_engine", PASS, f"Docker engine {version.get('Version')} (API {version.get('ApiVersion')})"
        )
        info = {"server_version": version.get("Version")}
    except EngineUnavailable as exc:
        return (
            Check("docker_engine", FAIL, str(exc).split(" (")[0], "start dockerd or use --local"),
            Check("buildkit", FAIL, "not checked: no engine", "start the Docker engine first"),
            {},
        )
    try:
        tool = detect_build_tool()
        info["build_tool"] = tool.describe
        return engine, Check("buildkit", PASS, tool.describe), info
    except EngineUnavailable as exc:
        return (
            engine,
            Check(
                "buildkit",
                FAIL,
                str(exc).split(". ")[0],
                "install the buildx plugin (docker-buildx-plugin / docker-buildx)",
            ),
            info,
        )


def host_record(host: HostView | None = None, flavor: str = "auto", site_recipes: Path | None = None) -> dict:
    """Run every check; the record is what `doctor --json` prints and what each run result carries. The kernel and
    cell checks read the packaged recipes with the site's folder `site_recipes` over them.

    flavor "rocm" makes missing GPU pieces failures; "auto" does so only when an AMD GPU driver or
    /dev/kfd is present (on a CPU-only host they are warnings: cpu images and --local still work).
    """
    host = host or HostView()
    loaded = recipes.load(site=site_recipes)
    gpus = kfd_gpus(host)
    amd_present = host.path("/sys/module/amdgpu").is_dir() or host.path("/dev/kfd").exists()
    gpu_expected = flavor == "rocm" or (flavor == "auto" and amd_present)
    checks = [
        _check_kernel(host, loaded),
        _check_driver(host, gpu_expected),
        _check_devices(host, gpu_expected),
        _check_archs(host, gpus, gpu_expected),
        _check_iommu(host, gpus),
        _check_rocm_userspace(host),
    ]
    archs = sorted({g.arch for g in gpus})
    kernel = host.read("/proc/sys/kernel/osrelease") or (platform.release() if host.is_real_root else None)
    cells = runnable_cells(archs, kernel, loaded)
    checks.append(_check_cells(archs, cells))
    engine_info: dict = {}
    if host.check_engine:
        engine, buildkit, engine_info = _check_engine()
        checks += [engine, buildkit]
    os_release = dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', host.read("/etc/os-release") or "", re.M))
    return {
        "hostname": socket.gethostname() if host.is_real_root else None,
        "os": os_release.get("PRETTY_NAME"),
        "kernel": host.read("/proc/sys/kernel/osrelease") or (platform.release() if host.is_real_root else None),
        "amdgpu_version": host.read("/sys/module/amdgpu/version"),
        "kernel_cmdline": host.read("/proc/cmdline"),
        "cpu_count": os.cpu_count() if host.is_real_root else None,
        "gpus": [asdict(g) for g in gpus],
        "gpu_archs": archs,
        "runnable_cells": cells,
        "docker": engine_info,
        "checks": [asdict(c) for c in checks],
        "status": overall(checks),
    }


def overall(checks: list[Check]) -> str:
    statuses = {c.status for c in checks}
    return FAIL if FAIL in statuses else WARN if WARN in statuses else PASS
