"""`envbuild matrix diff --sbom A B`: the SBOMs of two cells' newest builds (or two SBOM files), package by package.

A cell's SBOM is the one its newest build with an SBOM keeps in its attempt folder (only a folder the store created,
and only the file its build record names by sha256: builder.store.attempt_files); a path to an `sbom.cdx.json` is
read as it is, bounded. Either way the document is read by builder.sbom.read_components.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from builder import sbom, strict_json
from builder.paths import SBOM_FILE
from builder.report import diff
from builder.store import attempt_files
from builder.store.store import MatrixStore


class SbomDiffError(ValueError):
    """A side whose SBOM cannot be had (bad input, exit 2): the message says why and what to do."""


def components(db: Path, ref: str) -> tuple[str, dict[str, str]]:
    """(where the SBOM came from, its components) for `ref`: a path to an SBOM file, or a cell key of the matrix."""
    path = Path(ref)
    if path.is_file():
        return str(path), _read_sbom_file(path)
    with MatrixStore.open(db, readonly=True) as store:
        builds = store.builds(ref)
    for build in reversed(builds):
        link = (build.get("record") or {}).get("sbom")
        if not link:
            continue
        found, why_not = attempt_files.attempt_log(db, build.get("attempt_dir"), (SBOM_FILE,))
        if found is None:
            continue
        data = _bytes(found)
        if hashlib.sha256(data).hexdigest() != link["sha256"]:
            raise SbomDiffError(f"{found} is not the SBOM build {build['build_uid']} of {ref} links (changed since)")
        return f"{ref} build {build['build_uid'][:12]} ({build.get('image_tag')})", _parse_sbom(data, found)
    raise SbomDiffError(
        f"no build of {ref!r} in the matrix keeps an SBOM (`envbuild image` writes one for each image it builds); "
        "or give the path of an sbom.cdx.json"
    )


def rows(db: Path, ref_a: str, ref_b: str) -> tuple[str, str, list[diff.Row]]:
    """(A's source, B's source, the rows of the comparison, differences first)."""
    label_a, a = components(db, ref_a)
    label_b, b = components(db, ref_b)
    return label_a, label_b, diff.sbom_rows(a, b)


def _bytes(path: Path) -> bytes:
    try:
        return strict_json.read_regular(path, sbom.MAX_SBOM_BYTES)
    except (OSError, ValueError) as exc:
        raise SbomDiffError(f"{path}: {exc}") from None


def _read_sbom_file(path: Path) -> dict[str, str]:
    return _parse_sbom(_bytes(path), path)


def _parse_sbom(data: bytes, where) -> dict[str, str]:
    try:
        return sbom.read_components(data)
    except sbom.SbomError as exc:
        raise SbomDiffError(f"{where}: {exc}") from None
