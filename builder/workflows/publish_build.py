"""`envbuild matrix publish BUILD_RECORD`: a build record into results/<cell>/<name>/, optionally signed.

`prepare` reads the record through the door (verify_build.read) and recomputes its cell from its context with the
recipes in use: a record whose context they do not render is refused before anything is written, since no one
could import it. `write` puts the record into the folder the caller chose (its bytes as read: the attestation
covers exactly what was published), the image's SBOM and provenance statement it links (each checked against its
sha256), and, with a key, its attestation beside it (build_signing) and the provenance's envelope signed by the same
key. The build's log stays home: the record carries the failing step's last lines.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from builder import __version__
from builder.attest import build_provenance, build_signing, signing
from builder.paths import BUILD_RECORD, PROVENANCE_FILE
from builder.plan.cells import Cell
from builder.workflows import build_evidence, verify_build


class PublishError(Exception):
    """The record cannot be published (bad input, exit 2); nothing was written."""


@dataclass(frozen=True)
class Prepared:
    raw: bytes
    record: dict
    cell: Cell
    source: Path  # the folder the record was read from (its SBOM and provenance are beside it)


def prepare(record_path: Path, site: Path | None = None) -> Prepared:
    """The record read, validated and its cell recomputed; PublishError saying why not."""
    try:
        raw, record = verify_build.read(record_path)
        cell = verify_build.cell_of(record, site)
    except (signing.AttestationInputError, verify_build.CellNotRecomputed) as exc:
        raise PublishError(f"{record_path}: {exc}") from None
    return Prepared(raw, record, cell, Path(record_path).parent)


def write(prepared: Prepared, target: Path, key: Path | None, commands: tuple[str, ...]) -> tuple[Path, Path | None]:
    """Write the record, the SBOM and provenance it links (and, with `key`, its attestation and the provenance's
    envelope, signed by `key`) into the new folder `target`; (record, attestation). A linked file that is missing or
    changed, or a key that cannot sign, removes the folder again and raises PublishError."""
    target.mkdir(parents=True)
    try:
        record_file = target / BUILD_RECORD
        record_file.write_bytes(prepared.raw)
        build_evidence.copy_linked(prepared.record, prepared.source, target)
        attestation = None
        if key is not None:
            attestation = build_signing.attest(record_file, key, commands=list(commands), envbuild_version=__version__)
            if prepared.record.get("provenance"):
                build_provenance.sign_file(target / PROVENANCE_FILE, key)
    except signing.AttestationInputError as exc:
        shutil.rmtree(target, ignore_errors=True)
        raise PublishError(str(exc)) from None
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return record_file, attestation
