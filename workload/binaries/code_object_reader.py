"""Which GPU archs a binary carries code for: clang offload bundles in HIP fat binaries, per-arch library files.

"HIP error: invalid device function" / "no kernel image is available" at run time means the GPU's arch has
no code object in the library that launched the kernel. This module reads that off the files, with no GPU
and no ROCm tools (standard library only, so `envbuild inspect` can use it on the host too):

- HIP fat binaries (libtorch_hip.so, any hipcc output) hold one or more clang offload bundles in their
  `.hip_fatbin` section: the magic `__CLANG_OFFLOAD_BUNDLE__`, a little-endian uint64 entry count, then per
  entry uint64 offset, uint64 size, uint64 triple length and the triple, e.g.
  `hipv4-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-` (format: clang's ClangOffloadBundler documentation;
  checked against `clang-offload-bundler --list` of llvm-15 on hipcc 5.2.3 output in tests/engine/test_codeobjects.py).
- Newer clang may compress bundles (magic `CCOB`); those are counted and reported as not decoded.
- rocBLAS and hipBLASLt keep per-arch kernel files (`.../rocblas/library/*gfx90a*`, or a versioned
  `rocblas/4.4.1/library` as Debian ships it): counted by arch name.
- What torch loads (`loaded_split`): torch's own libraries and the libraries they name in DT_NEEDED,
  transitively, found in torch/lib or the ROCm lib dirs (the legacy /opt/rocm/lib and TheRock's
  /opt/rocm/core-<version>/lib: rocm_layout), with the kernel dirs of those that have them. Every
  other library there is "other": a library nothing torch loads may target fewer GPUs without harm.

    python -m workload.binaries.code_object_reader PATH... [--arch gfx90a] [--json]
"""

from __future__ import annotations

import argparse
import json
import mmap
import re
import struct
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import rocm_layout
from .elf_needed import closure

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED_MAGIC = b"CCOB"
_ARCH = re.compile(r"gfx[0-9a-f]{3,4}")
_KERNEL_LIBRARIES = ("rocblas", "hipblaslt")  # lib<name>.so reads <its dir>/<name>/[version/]library/*
_TORCH_LIBRARIES = ("libtorch", "libc10", "libcaffe2", "libshm")  # torch's own, in torch/lib
_MAX_ENTRIES = 4096  # sanity bound while parsing: a bundle header claiming more is not one


@dataclass
class BinaryArchs:
    """What one file carries: base archs (features like `:xnack-` stripped) and bundle counts."""

    path: str
    archs: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)  # full target ids, e.g. gfx90a:sramecc+:xnack-
    bundles: int = 0
    compressed_bundles: int = 0  # CCOB bundles seen but not decoded


@dataclass
class Coverage:
    """Code-object coverage of a set of files for one requested arch."""

    arch: str | None
    binaries: list[BinaryArchs]
    library_files: dict[str, dict[str, int]]  # library dir -> arch -> file count

    @property
    def archs(self) -> list[str]:
        return sorted({a for b in self.binaries for a in b.archs})

    @property
    def verdict(self) -> str:
        """ "present", "missing" or "unknown" (nothing readable) for the requested arch."""
        if self.arch is None:
            return "unknown"
        if not any(b.bundles for b in self.binaries) and not self.library_files:
            return "unknown"
        in_binaries = all(self.arch in b.archs for b in self.binaries if b.bundles)
        in_libraries = all(self.arch in counts for counts in self.library_files.values())
        return "present" if in_binaries and in_libraries else "missing"

    def missing_in(self) -> list[str]:
        """Files and library dirs that lack the requested arch."""
        if self.arch is None:
            return []
        return [b.path for b in self.binaries if b.bundles and self.arch not in b.archs] + [
            d for d, counts in self.library_files.items() if self.arch not in counts
        ]

    def to_json(self) -> dict:
        return {
            "arch": self.arch,
            "verdict": self.verdict,
            "archs": self.archs,
            "missing_in": self.missing_in(),
            "binaries": [asdict(b) for b in self.binaries],
            "library_files": self.library_files,
        }


def target_id(triple: str) -> str | None:
    """`hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-` -> `gfx90a:xnack-`; None for host or non-AMDGPU entries."""
    if "amdgcn" not in triple or "amdhsa" not in triple:
        return None
    return triple.split("amdhsa", 1)[1].lstrip("-") or None


def target_arch(triple: str) -> str | None:
    """`hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-` -> `gfx90a`; None for host or non-AMDGPU entries."""
    target = target_id(triple)
    match = _ARCH.match(target) if target else None
    return match.group(0) if match else None


def _bundle_triples(data: mmap.mmap | bytes, start: int) -> list[str] | None:
    """Triples of the uncompressed bundle at `start`, or None if the header does not parse."""
    pos = start + len(BUNDLE_MAGIC)
    try:
        (count,) = struct.unpack_from("<Q", data, pos)
        if not 0 < count <= _MAX_ENTRIES:
            return None
        pos += 8
        triples = []
        for _ in range(count):
            _offset, _size, length = struct.unpack_from("<QQQ", data, pos)
            pos += 24
            if length > 1024:
                return None
            triples.append(bytes(data[pos : pos + length]).decode("ascii"))
            pos += length
        return triples
    except (struct.error, UnicodeDecodeError):
        return None


def scan_binary(path: Path) -> BinaryArchs:
    """Every offload bundle in `path` (the file is memory-mapped, so a 1 GB library costs no RAM)."""
    result = BinaryArchs(path=str(path))
    targets: set[str] = set()
    with open(path, "rb") as handle:
        try:
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # empty file
            return result
        with data:
            pos = data.find(BUNDLE_MAGIC)
            while pos != -1:
                triples = _bundle_triples(data, pos)
                if triples is not None:
                    result.bundles += 1
                    targets.update(tid for t in triples if target_arch(t) and (tid := target_id(t)))
                pos = data.find(BUNDLE_MAGIC, pos + len(BUNDLE_MAGIC))
            pos = data.find(COMPRESSED_MAGIC)
            while pos != -1:
                (version,) = struct.unpack_from("<H", data, pos + 4) if pos + 6 <= len(data) else (0,)
                result.compressed_bundles += 1 if version in (1, 2, 3) else 0
                pos = data.find(COMPRESSED_MAGIC, pos + 4)
    result.targets = sorted(targets)
    result.archs = sorted({t.split(":")[0] for t in targets})
    return result


def _arch_counts(directory: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in directory.iterdir():
        for arch in set(_ARCH.findall(f.name)):
            counts[arch] = counts.get(arch, 0) + 1
    return dict(sorted(counts.items()))


def library_files(root: Path) -> dict[str, dict[str, int]]:
    """{library dir: {arch: number of files naming it}} for rocBLAS/hipBLASLt kernel dirs under `root`."""
    if not root.is_dir():
        return {}
    dirs = {d for name in _KERNEL_LIBRARIES for d in root.glob(f"**/{name}/**/library") if d.is_dir()}
    return {str(d): _arch_counts(d) for d in sorted(dirs)}


def kernel_dirs_of(library: Path) -> dict[str, dict[str, int]]:
    """The kernel dirs `library` reads (librocblas.so.* -> rocblas/**/library beside it), as library_files."""
    for name in _KERNEL_LIBRARIES:
        if library.name.startswith(f"lib{name}.so") and (library.parent / name).is_dir():
            dirs = [d for d in (library.parent / name).glob("**/library") if d.is_dir()]
            return {str(d): _arch_counts(d) for d in sorted(dirs)}
    return {}


def _is_shared_library(p: Path) -> bool:
    return p.suffix == ".so" or ".so." in p.name


def _library_files(root: Path) -> list[Path]:
    """`root` itself, or every shared library under it once (a symlink chain counts as its target file)."""
    if root.is_file():
        return [root]
    real = {p.resolve() for p in root.rglob("*") if p.is_file() and _is_shared_library(p)}
    return sorted(real)


def _scan_all(files: list[Path]) -> list[BinaryArchs]:
    return [b for b in (scan_binary(p) for p in files) if b.bundles or b.compressed_bundles]


def coverage(paths: list[Path], arch: str | None = None) -> Coverage:
    """Scan files (or every shared library under directories) and library kernel dirs for `arch`."""
    binaries, libs = [], {}
    for root in paths:
        if not root.exists():
            raise FileNotFoundError(f"{root}: no such file or directory")
        binaries += _scan_all(_library_files(root))
        libs |= library_files(root)
    return Coverage(arch=arch, binaries=binaries, library_files=libs)


def loaded_split(torch_lib: Path, rocm_libs: list[Path], arch: str | None) -> tuple[Coverage, Coverage]:
    """(what torch loads, everything else in torch_lib and rocm_libs), each as a Coverage for `arch`.

    Loaded: torch's own libraries in `torch_lib` (libtorch*, libc10*, ...) and, transitively, the libraries
    their DT_NEEDED entries name that are found in `torch_lib` or `rocm_libs` (in that order, as a wheel's
    bundled copies come first), plus the rocBLAS/hipBLASLt kernel dirs of the loaded ones."""
    dirs = [d.resolve() for d in [torch_lib, *rocm_libs] if d.is_dir()]
    roots = (
        sorted(
            p
            for p in dirs[0].iterdir()
            if p.is_file() and _is_shared_library(p) and p.name.startswith(_TORCH_LIBRARIES)
        )
        if torch_lib.is_dir()
        else []
    )
    loaded = {str(p) for p in closure(roots, dirs)}
    loaded_dirs: dict[str, dict[str, int]] = {}
    for library in loaded:
        loaded_dirs |= kernel_dirs_of(Path(library))
    everything = coverage(dirs, arch)  # one scan of each file, split below
    return (
        Coverage(
            arch=arch,
            binaries=[b for b in everything.binaries if b.path in loaded],
            library_files=dict(sorted(loaded_dirs.items())),
        ),
        Coverage(
            arch=arch,
            binaries=[b for b in everything.binaries if b.path not in loaded],
            library_files={d: c for d, c in everything.library_files.items() if d not in loaded_dirs},
        ),
    )


def torch_lib() -> Path | None:
    """torch/lib of the importable torch (found without importing it), or None."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    return Path(spec.origin).parent / "lib" if spec and spec.origin else None


def library_dirs(root: Path = Path("/")) -> tuple[Path, list[Path]]:
    """(torch/lib of the importable torch, the lib dirs of every ROCm prefix under `root`: TheRock's
    /opt/rocm/core-<version> and the legacy /opt/rocm, rocm_layout.library_dirs): where torch's libraries load from,
    as `loaded_split` takes them (the arch probe, the image's verify step and `envbuild inspect IMAGE`)."""
    return torch_lib() or Path("/nonexistent"), rocm_layout.library_dirs(root)


def torch_paths(root: Path = Path("/")) -> list[Path]:
    """torch/lib of the importable torch plus the ROCm lib dirs under `root` (what an image's kernels come from)."""
    torch = torch_lib()
    return [p for p in [torch] if p is not None and p.is_dir()] + rocm_layout.library_dirs(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workload.binaries.code_object_reader", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        help="files or dirs (default: torch/lib and the ROCm lib dirs: /opt/rocm/lib, /opt/rocm/core-<version>/lib)",
    )
    parser.add_argument("--arch", help="the GPU arch that must be present, e.g. gfx90a")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        cov = coverage(args.paths or torch_paths(), args.arch)
    except (FileNotFoundError, PermissionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(cov.to_json(), indent=2))
    else:
        for b in cov.binaries:
            extra = f", {b.compressed_bundles} compressed (not decoded)" if b.compressed_bundles else ""
            print(f"{b.path}: {', '.join(b.targets) or '-'} ({b.bundles} bundles{extra})")
        for directory, counts in cov.library_files.items():
            print(f"{directory}: " + ", ".join(f"{a} ({n} files)" for a, n in counts.items()))
        print(f"{args.arch or 'arch'}: {cov.verdict}")
    return {"present": 0, "missing": 1}.get(cov.verdict, 0 if args.arch is None else 1)


if __name__ == "__main__":
    sys.exit(main())
