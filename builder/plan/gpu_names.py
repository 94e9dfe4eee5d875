"""Marketing GPU names -> LLVM targets (recipes/gpu-names.toml): `--arch MI250X` means gfx90a."""

from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from pathlib import Path

from builder.paths import RECIPES_DIR

GPU_NAMES_FILE = RECIPES_DIR / "gpu-names.toml"
_PREFIX = re.compile(r"^(amd)?(instinct|radeon)?")
_GFX = re.compile(r"gfx[0-9a-f]{3,4}")


def _normal(name: str) -> str:
    """Case, spaces and hyphens ignored, and an optional AMD / Instinct / Radeon in front."""
    return _PREFIX.sub("", re.sub(r"[\s_-]+", "", name.lower()))


@lru_cache(maxsize=4)
def names(path: Path = GPU_NAMES_FILE) -> dict[str, tuple[str, str]]:
    """normalised name -> (gfx target, the name as AMD writes it)."""
    table = tomllib.loads(path.read_text())["name"] if path.is_file() else {}
    for name, target in table.items():
        if not isinstance(target, str) or not _GFX.fullmatch(target):
            raise ValueError(f"{path}: {name!r} must map to a gfx target, got {target!r}")
    return {_normal(name): (target, name) for name, target in table.items()}


def canonical(value: str) -> tuple[str, str]:
    """(gfx target, marketing name or "") for an --arch value; a value that is no known name comes back as is."""
    found = names().get(_normal(value))
    return found if found else (value, "")


def looks_like_a_name(value: str) -> bool:
    """True for an --arch value that is no LLVM target (gfx...): a marketing name, known or not ("MI400")."""
    return not value.lower().startswith("gfx")


def suggestions(value: str, targets: list[str], n: int = 3) -> list[str]:
    """The known marketing names nearest to `value` whose target is in `targets`, as "MI300X (gfx942)"."""
    import difflib

    table = {normal: (gfx, name) for normal, (gfx, name) in names().items() if gfx in targets}
    near = difflib.get_close_matches(_normal(value), list(table), n=n, cutoff=0)
    return [f"{table[normal][1]} ({table[normal][0]})" for normal in near]


def marketing_names(target: str) -> list[str]:
    """The marketing names of a gfx target, as AMD writes them."""
    return sorted(name for gfx, name in names().values() if gfx == target)
