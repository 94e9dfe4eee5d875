"""Which shared libraries a library loads: its ELF DT_NEEDED entries, followed through a list of library dirs.

Standard library only (the arch probe and `envbuild inspect` use it where no binutils are installed). Reads
64-bit little-endian ELF files through their section headers: the SHT_DYNAMIC section's DT_NEEDED values
are offsets into the string table its sh_link names (field layout: the System V gABI, "Dynamic Section";
checked against `readelf -d` on Debian's ROCm libraries in tests/integration/test_rocm_libs_debian.py).
"""

from __future__ import annotations

import struct
from pathlib import Path

_ELF_MAGIC = b"\x7fELF"
_SHT_DYNAMIC, _DT_NULL, _DT_NEEDED = 6, 0, 1
_MAX_SECTIONS = 65535
_MAX_TABLE = 16 << 20  # bytes read of one dynamic section or string table: a header claiming more is broken


def needed(path: Path) -> list[str]:
    """The DT_NEEDED names of an ELF64 little-endian file, in order; [] for anything else."""
    with open(path, "rb") as handle:
        header = handle.read(64)
        if len(header) < 64 or header[:4] != _ELF_MAGIC or header[4] != 2 or header[5] != 1:
            return []
        (shoff,) = struct.unpack_from("<Q", header, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", header, 0x3A)
        if not shoff or shentsize < 64 or not 0 < shnum <= _MAX_SECTIONS:
            return []
        handle.seek(shoff)
        table = handle.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(len(table) // shentsize)]
        for _name, kind, _flags, _addr, offset, size, link, _info, _align, _entsize in sections:
            if kind != _SHT_DYNAMIC or link >= len(sections):
                continue
            str_offset, str_size = sections[link][4], sections[link][5]
            if size > _MAX_TABLE or str_size > _MAX_TABLE:
                return []
            handle.seek(offset)
            dynamic = handle.read(size)
            handle.seek(str_offset)
            strings = handle.read(str_size)
            names = []
            for tag, value in struct.iter_unpack("<qQ", dynamic[: len(dynamic) // 16 * 16]):
                if tag == _DT_NULL:
                    break
                end = strings.find(b"\0", value) if tag == _DT_NEEDED and value < len(strings) else -1
                if end != -1:
                    names.append(strings[value:end].decode("utf-8", "replace"))
            return names
    return []


def closure(roots: list[Path], search_dirs: list[Path]) -> list[Path]:
    """`roots` plus every library they load, transitively, that is found in `search_dirs` (first match wins,
    as the loader's RUNPATH order would); names found nowhere there (libc, libstdc++) are not followed."""
    seen: dict[Path, None] = {}
    queue = list(roots)
    while queue:
        path = queue.pop(0)
        real = path.resolve()
        if real in seen:
            continue
        seen[real] = None
        for name in needed(path):
            if "/" in name:  # a DT_NEEDED with a slash is a path, never searched
                continue
            found = next((d / name for d in search_dirs if (d / name).is_file()), None)
            if found is not None:
                queue.append(found)
    return list(seen)
