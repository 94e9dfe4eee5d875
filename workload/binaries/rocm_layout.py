"""Where a ROCm userspace lives on a machine or in an image: TheRock's `/opt/rocm/core-<version>` and the legacy
`/opt/rocm`, each with the libraries and tools under it (standard library only, so the host tool can use it too).

Layouts, from AMD's transition guide (ROCm/rocm-docs docs/about/transition-guide-TheRock.md, read at
9bcf25db1e77f58b435fe162baaa99566bac0189 for 10.1; rocm.docs.amd.com docs-7.14.0 and 7.13.0-preview for 7.x):
- ROCm 10 (TheRock) installs to `/opt/rocm/core-<major.minor>` (`/opt/rocm/core-10.1`), with a shared prefix for
  projects built on it in `/opt/rocm/extras-<major>/`; ROCm 7.13/7.14 used `/opt/rocm/core` and `/opt/rocm/extras-7/`.
  Its distribution packages (`amdrocm-*`) add backward-compatible `/opt/rocm/bin`, `/opt/rocm/lib` symlinks; a tarball
  install does not (the guide: set PATH, LD_LIBRARY_PATH and ROCM_PATH to the extracted location instead).
- The legacy releases install to `/opt/rocm-<version>` with `/opt/rocm` pointing at one of them.
A prefix counts when it holds `lib/` or `bin/`. `$ROCM_PATH`, when the environment sets it, is looked at first.
The version is the first line of the prefix's `.info/version` (legacy ROCm writes it there; whether TheRock's
`core-<version>` has that file is not verified: its directory name gives major.minor then).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_CORE = re.compile(r"core(?:-(?P<version>\d+\.\d+))?")
_EXTRAS = re.compile(r"extras-\d+")
_LEGACY = re.compile(r"rocm-(?P<version>\d+\.\d+(?:\.\d+)?)")
_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?(?:[-.][0-9A-Za-z.]+)?")


@dataclass(frozen=True)
class RocmInstall:
    """One ROCm prefix: where it is, its layout ("core": TheRock's, "legacy"), and its version when readable."""

    prefix: Path
    layout: str
    version: str | None


def installs(root: Path = Path("/"), env: dict[str, str] | None = None) -> list[RocmInstall]:
    """The ROCm prefixes under `root`: $ROCM_PATH when set, TheRock's /opt/rocm/core-<version> (newest first) and
    /opt/rocm/core, then the legacy /opt/rocm and /opt/rocm-<version> (newest first); one per real lib/ directory
    (bin/ when it has no lib/), under the first of these names."""
    env = os.environ if env is None else env
    opt = root / "opt"
    candidates: list[tuple[Path, str, str | None]] = []
    if env.get("ROCM_PATH", "").startswith("/"):
        given = root / env["ROCM_PATH"].lstrip("/")
        core = _CORE.fullmatch(given.name)
        candidates.append((given, "core" if core else "legacy", core["version"] if core else None))
    cores = [(p, m["version"]) for p in _children(opt / "rocm") if (m := _CORE.fullmatch(p.name))]
    candidates += [(p, "core", v) for p, v in sorted(cores, key=lambda pv: _key(pv[1] or "0"), reverse=True)]
    candidates.append((opt / "rocm", "legacy", None))
    legacy = [(p, m["version"]) for p in _children(opt) if (m := _LEGACY.fullmatch(p.name))]
    candidates += [(p, "legacy", v) for p, v in sorted(legacy, key=lambda pv: _key(pv[1]), reverse=True)]
    found, seen = [], set()
    for prefix, layout, named in candidates:
        # one install per real lib/ (else bin/): /opt/rocm whose lib and bin link into core-10.1 is that install
        where = next((prefix / d for d in ("lib", "bin") if (prefix / d).is_dir()), None)
        if where is None or where.resolve() in seen:
            continue
        seen.add(where.resolve())
        version = _version_file(prefix) or _version_file(where.resolve().parent) or named  # lib/ may link elsewhere
        found.append(RocmInstall(prefix, layout, version))
    return found


def library_dirs(root: Path = Path("/"), env: dict[str, str] | None = None) -> list[Path]:
    """The lib/ of every ROCm prefix (installs) and of TheRock's /opt/rocm/extras-<major>/, each real directory once
    (/opt/rocm/lib symlinked into /opt/rocm/core-10.1/lib counts once, under its first name)."""
    dirs = [i.prefix / "lib" for i in installs(root, env)]
    dirs += [p / "lib" for p in _children(root / "opt" / "rocm") if _EXTRAS.fullmatch(p.name)]
    out, seen = [], set()
    for d in dirs:
        if d.is_dir() and d.resolve() not in seen:
            seen.add(d.resolve())
            out.append(d)
    return out


def tool(name: str, root: Path = Path("/"), env: dict[str, str] | None = None) -> Path | None:
    """bin/<name> of the first ROCm prefix that has it (rocminfo), or None."""
    for install in installs(root, env):
        path = install.prefix / "bin" / name
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def _children(directory: Path) -> list[Path]:
    try:
        return [p for p in directory.iterdir() if p.is_dir()]
    except OSError:
        return []


def _version_file(prefix: Path) -> str | None:
    try:
        with open(prefix / ".info" / "version", encoding="utf-8", errors="replace") as handle:
            text = handle.read(64)  # a version line; the file is the image's own, so only this much is read
    except OSError:
        return None
    first = text.split("\n", 1)[0].strip()
    return first if _VERSION.fullmatch(first) else None


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))
