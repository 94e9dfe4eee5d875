"""A site's own recipe folder over the packaged recipes/ (`envbuild --recipes DIR`, or ENVBUILD_RECIPES=DIR, both
read by the CLI alone and passed down as a path).

The overlay has recipes/'s shape. Its TOML files merge into the packaged ones entry by entry: a named entry
(`[release."6.3"]`, `[torch."2.7"]`, `[stack."2.7"]`, `[flavor.x]`) is added or replaces the packaged one,
an array of tables (`[[build]]`) is extended, a plain value replaced. Any other file (a lock, a patch, a
series, a drop-in, a new releases file) is added or replaces the packaged file of the same path. The result is
written once per process to a private folder that `recipes.load` reads like recipes/ itself, so everything
downstream (resolve, lock, render, the content hash) sees one tree; `origins` says which entries the site gave.
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from builder import bounded_read
from builder.paths import RECIPES_ENV_VAR

#: What one overlay file may weigh: a TOML file (the packaged ones are a few KB), a patch or a lock.
MAX_TOML_BYTES = 1 << 20
MAX_FILE_BYTES = 16 << 20


class OverlayError(Exception):
    """The site's recipe folder cannot be read: not a folder, a link, or a TOML file that does not parse."""


@dataclass(frozen=True)
class Overlay:
    """A merged recipes tree and what in it came from the site's folder."""

    source: Path  # the site's folder
    root: Path  # the merged tree
    entries: frozenset[tuple[str, str, str]]  # (file, table, name) of each TOML entry the site gave
    files: frozenset[str]  # relative paths of the non-TOML-entry files it gave
    dropin_names: frozenset[str]  # flavors and torch lines its flavors.d/ drop-ins define


def _overlay_files(folder: Path) -> list[Path]:
    """Every regular file under `folder`, relative; links are refused (they could name anything)."""
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            raise OverlayError(f"{path}: a symbolic link in the recipe overlay; copy the file in instead")
        if not path.is_dir():  # a FIFO or device is refused where it is read
            found.append(path.relative_to(folder))
    return found


def _read_toml(path: Path) -> dict:
    """A TOML file of the overlay, read by builder.bounded_read (size, nesting and key length capped)."""
    try:
        text = bounded_read.read_file(path, MAX_TOML_BYTES).decode("utf-8")
        bounded_read.check_toml(text)
        return tomllib.loads(text)
    except (OSError, ValueError) as exc:  # UnicodeDecodeError, TOMLDecodeError and BoundedReadError are ValueErrors
        raise OverlayError(f"{path}: {exc}") from None


def _copy(source: Path, target: Path) -> None:
    """Any other overlay file, read by builder.bounded_read (a regular file of at most MAX_FILE_BYTES)."""
    try:
        data = bounded_read.read_file(source, MAX_FILE_BYTES)
    except (OSError, ValueError) as exc:
        raise OverlayError(f"{source}: {exc}") from None
    target.write_bytes(data)


def _merge(base: dict, extra: dict, file: str, entries: set) -> dict:
    merged = dict(base)
    for key, value in extra.items():
        old = merged.get(key)
        if isinstance(value, dict) and isinstance(old, dict) and all(isinstance(v, dict) for v in value.values()):
            merged[key] = {**old, **value}
            entries.update((file, key, name) for name in value)
        elif isinstance(value, list) and isinstance(old, list):
            merged[key] = old + value
            entries.add((file, key, f"+{len(value)}"))
        else:
            merged[key] = value
            entries.add((file, key, ""))
    return merged


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # written as \uXXXX: TOML's basic strings hold none of them raw


def _toml_text(data: dict) -> str:
    """TOML for the merged data (tables of scalars, arrays and nested tables: what recipes/ holds)."""
    lines: list[str] = []

    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            escaped = v.replace("\\", "\\\\").replace('"', '\\"')
            return '"' + _CONTROL.sub(lambda m: f"\\u{ord(m[0]):04x}", escaped) + '"'
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + "}"
        raise OverlayError(f"a recipe value of type {type(v).__name__} cannot be merged")

    def key(k: str) -> str:
        return k if k.replace("-", "").replace("_", "").isalnum() and k.isascii() else value(k)

    def table(prefix: str, data: dict) -> None:
        scalars = {k: v for k, v in data.items() if not isinstance(v, dict) and not _is_table_array(v)}
        if prefix:
            lines.append(f"[{prefix}]")
        lines.extend(f"{key(k)} = {value(v)}" for k, v in scalars.items())
        for k, v in data.items():
            name = f"{prefix}.{key(k)}" if prefix else key(k)
            if isinstance(v, dict):
                table(name, v)
            elif _is_table_array(v):
                for item in v:
                    lines.append(f"[[{name}]]")
                    lines.extend(f"{key(a)} = {value(b)}" for a, b in item.items())

    table("", data)
    return "\n".join(lines) + "\n"


def _is_table_array(v) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def build(packaged: Path, site: Path) -> Overlay:
    """The merged tree of `packaged` with `site` over it, in a folder removed when the process ends."""
    if not site.is_dir() or site.is_symlink():
        raise OverlayError(
            f"{site} is not a folder (--recipes / ${RECIPES_ENV_VAR} names a folder shaped like recipes/)"
        )
    root = Path(tempfile.mkdtemp(prefix="envbuild-recipes-"))
    atexit.register(shutil.rmtree, root, True)
    shutil.copytree(packaged, root / "recipes", dirs_exist_ok=True)
    merged_root = root / "recipes"
    entries: set = set()
    files: set = set()
    for rel in _overlay_files(site):
        target = merged_root / rel
        if rel.suffix == ".toml" and len(rel.parts) == 1 and target.exists():
            merged = _merge(_read_toml(target), _read_toml(site / rel), rel.as_posix(), entries)
            target.write_text(_toml_text(merged), encoding="utf-8")
            try:
                tomllib.loads(target.read_text())  # what was written reads back
            except tomllib.TOMLDecodeError as exc:
                raise OverlayError(f"{site / rel}: cannot be merged into the packaged {rel} ({exc})") from None
        else:
            if rel.suffix == ".toml":
                _read_toml(site / rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            _copy(site / rel, target)
            files.add(rel.as_posix())
    dropins = [_read_toml(site / f) for f in files if f.startswith("flavors.d/") and f.endswith(".toml")]
    names = {name for data in dropins for table in ("flavor", "torch") for name in data.get(table, {})}
    return Overlay(site.resolve(), merged_root, frozenset(entries), frozenset(files), frozenset(names))


_CACHE: dict[tuple[Path, Path], Overlay] = {}


def of(packaged: Path, site: Path | None) -> Overlay | None:
    """The overlay of the site's folder `site` over `packaged` (built once per process), or None without one."""
    if site is None:
        return None
    key = (packaged, Path(site).resolve())
    if key not in _CACHE:
        _CACHE[key] = build(packaged, Path(site))
    return _CACHE[key]


def origin(overlay: Overlay | None, flavor: str, releases_file: str, release: str | None, torch_line: str) -> str:
    """'site' when the cell's flavor, release or torch line came from the site's folder, else 'packaged'."""
    if overlay is None:
        return "packaged"
    if (
        (releases_file, "release", release) in overlay.entries
        or ("torch.toml", "torch", torch_line) in overlay.entries
        or ("flavors.toml", "flavor", flavor) in overlay.entries
    ):
        return "site"
    if releases_file in overlay.files or {flavor, torch_line} & overlay.dropin_names:
        return "site"
    return "packaged"
