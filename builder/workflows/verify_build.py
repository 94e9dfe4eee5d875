"""Check a build record the way every door does: read it bounded, validate it (build_record_schema), verify its
attestation (who signed: our allowed_signers), and recompute its cell from its context with our recipes
(builder.plan.context_identity): the cell it is filed under is ours, never the record's word.

`check` returns a CheckedBuild, or the reason it did not pass: a VerificationFailure (a signature that does not
verify, a record whose context no recipe here renders: exit 1) or an AttestationInputError (a file that cannot be
read or breaks the schema: exit 2).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from builder import strict_json

from builder.attest import build_signing, signing
from builder.plan.cells import Cell
from builder.plan.context_identity import ContextNotRecomputed, recompute
from builder.store import build_record_schema
from builder.paths import BUILD_RECORD, PROVENANCE_ENVELOPE, SBOM_FILE
from builder.sbom import MAX_SBOM_BYTES
from builder.store.provenance import Provenance
from builder.workflows import verify_provenance


class CellNotRecomputed(signing.VerificationFailure):
    """The record's context is not one the recipes in use render for its request: it names no cell here."""

    check = "cell"


class UnsignedBuild(signing.VerificationFailure):
    check = "unsigned"


@dataclass(frozen=True)
class CheckedBuild:
    path: Path
    record: dict  # validated and cleaned by build_record_schema
    cell: Cell  # recomputed from the context, never read from the record
    provenance: Provenance
    linked: tuple[str, ...] = ()  # the linked files checked beside it (the image's SBOM, its signed provenance)


def read(path: Path) -> tuple[bytes, dict]:
    """(bytes, validated record) of a build record file; AttestationInputError when it cannot be read or breaks the
    schema (bad input)."""
    raw, parsed = build_signing.read_record(path)
    try:
        return raw, build_record_schema.validate(parsed)
    except build_record_schema.BuildRecordError as exc:
        raise signing.AttestationInputError(f"{path}: not a build record as docs/build-record.md says: {exc}") from None


def cell_of(record: dict, site: Path | None = None) -> Cell:
    """The record's cell, recomputed from its request, wheelhouse and context hash; CellNotRecomputed otherwise,
    and when the record claims another cell than the one its context is."""
    try:
        cell = recompute(record["request"], record["wheelhouse"], record["context_hash"], site=site)
    except ContextNotRecomputed as exc:
        raise CellNotRecomputed(str(exc)) from None
    claimed = Cell(**record["cell"]).key if _cell_like(record["cell"]) else "?"
    if claimed != cell.key:
        raise CellNotRecomputed(f"the record names cell {claimed}, but its context is {cell.key}'s")
    return cell


def check(
    path: Path, allowed_signers: Path, revoked: Path | None, *, require_signature: bool, site: Path | None = None
) -> CheckedBuild | signing.VerificationFailure | signing.AttestationInputError:
    """The checked build record at `path`, or why not. Without an attestation beside it, the record is unsigned:
    UnsignedBuild when `require_signature` (verify), an unsigned provenance otherwise (import)."""
    path = Path(path)
    try:
        raw, record = read(path)
        attestation = build_signing.attestation_beside(path)
        if attestation is None:
            if require_signature:
                return UnsignedBuild(
                    f"no {build_signing.BUILD_ATTESTATION_NAME} beside it: sign it (`envbuild matrix publish --sign`)"
                )
            provenance = Provenance()
        else:
            verified = build_signing.verify(attestation, allowed_signers, revoked, raw)
            provenance = Provenance.signed(verified.principal, verified.fingerprint, verified.envelope)
        cell = cell_of(record, site)
        linked = _linked(path, record, allowed_signers, revoked, site)
        if isinstance(linked, signing.VerificationFailure):
            return linked
        return CheckedBuild(path, record, cell, provenance, linked)
    except (signing.VerificationFailure, signing.AttestationInputError) as exc:
        return exc


def _linked(path: Path, record: dict, allowed_signers: Path, revoked: Path | None, site: Path | None):
    """The names of the files the record links that were checked beside it (its image's SBOM, its signed
    provenance), or why they do not verify."""
    if record.get("provenance"):
        outcome = verify_provenance.check(
            path.with_name(PROVENANCE_ENVELOPE), allowed_signers, revoked, site=site, record=record
        )
        if isinstance(outcome, signing.AttestationInputError):
            raise outcome
        if isinstance(outcome, verify_provenance.CheckedProvenance):
            return (PROVENANCE_ENVELOPE, *(c for c in outcome.compared if c != BUILD_RECORD))
        return outcome
    if record.get("sbom"):
        try:
            data = strict_json.read_regular(path.with_name(SBOM_FILE), MAX_SBOM_BYTES)
        except (OSError, ValueError) as exc:
            return verify_provenance.SbomMismatch(f"the record links {SBOM_FILE}, which cannot be read: {exc}")
        if hashlib.sha256(data).hexdigest() != record["sbom"]["sha256"]:
            return verify_provenance.SbomMismatch(f"{SBOM_FILE} is not the SBOM the record links")
        return (SBOM_FILE,)
    return ()


def _cell_like(value: dict) -> bool:
    try:
        Cell(**value)
    except (TypeError, ValueError):
        return False
    return True
