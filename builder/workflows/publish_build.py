"""`envbuild matrix publish BUILD_RECORD`: a build record into results/<cell>/<name>/, optionally signed.

`prepare` reads the record through the door (verify_build.read) and recomputes its cell from its context with the
recipes in use: a record whose context they do not render is refused before anything is written, since no one
could import it. `write` puts the record into the folder the caller chose (its bytes as read: the attestation
covers exactly what was published) and, with a key, its attestation beside it (build_signing). The build's log
stays home: the record carries the failing step's last lines.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from builder import __version__
from builder.attest import build_signing, signing
from builder.paths import BUILD_RECORD
from builder.plan.cells import Cell
from builder.workflows import verify_build


class PublishError(Exception):
    """The record cannot be published (bad input, exit 2); nothing was written."""


@dataclass(frozen=True)
class Prepared:
    raw: bytes
    record: dict
    cell: Cell


def prepare(record_path: Path, site: Path | None = None) -> Prepared:
    """The record read, validated and its cell recomputed; PublishError saying why not."""
    try:
        raw, record = verify_build.read(record_path)
        cell = verify_build.cell_of(record, site)
    except (signing.AttestationInputError, verify_build.CellNotRecomputed) as exc:
        raise PublishError(f"{record_path}: {exc}") from None
    return Prepared(raw, record, cell)


def write(prepared: Prepared, target: Path, key: Path | None, commands: tuple[str, ...]) -> tuple[Path, Path | None]:
    """Write the record (and, with `key`, its attestation) into the new folder `target`; (record, attestation).
    A key that cannot sign removes the folder again and raises PublishError."""
    target.mkdir(parents=True)
    try:
        record_file = target / BUILD_RECORD
        record_file.write_bytes(prepared.raw)
        attestation = None
        if key is not None:
            attestation = build_signing.attest(record_file, key, commands=list(commands), envbuild_version=__version__)
    except signing.AttestationInputError as exc:
        shutil.rmtree(target, ignore_errors=True)
        raise PublishError(str(exc)) from None
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return record_file, attestation
