"""`envbuild matrix verify` for an image's signed build provenance (provenance.intoto.jsonl), alone or as a build
record links it.

`check` verifies the envelope (signer from our allowed_signers, signature, revocation, the key valid when the build
finished, an SLSA v1 statement about an image: builder.attest.build_provenance) and then every file beside it that it
speaks of: provenance.json must be the signed statement; the SBOM must be the byproduct it names; a build context
folder beside it (an attempt's `context/`) must hold exactly the files it lists, each by sha256; a build record beside
it (or the one given) must link this statement and name its image, build id and context hash. Its cell is recomputed
from its request and context hash with the recipes in use (builder.plan.context_identity), never read from it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from builder.attest import build_provenance, build_signing, signing
from builder.paths import BUILD_RECORD, PROVENANCE_ENVELOPE, PROVENANCE_FILE, SBOM_FILE
from builder.plan.cells import Cell
from builder.plan.context_identity import ContextNotRecomputed, recompute_files
from builder.sbom import MAX_SBOM_BYTES
from builder import strict_json
from builder.store import build_record_schema
from builder.store.build_record_schema import BuildRequest

#: The folder of an attempt that holds the build context as it was built.
CONTEXT_DIR = "context"
#: The context's manifest: written after the files it hashes, so it is not among them.
MANIFEST_FILE = "manifest.json"


class ProvenanceMismatch(signing.VerificationFailure):
    """A file beside the provenance (its statement, the record, the context) is not what it signed."""

    check = "provenance"


class SbomMismatch(signing.VerificationFailure):
    check = "sbom"


class ProvenanceCell(signing.VerificationFailure):
    check = "cell"


class UnsignedProvenance(signing.VerificationFailure):
    check = "unsigned"


@dataclass(frozen=True)
class CheckedProvenance:
    path: Path
    principal: str
    fingerprint: str
    statement: dict
    cell: Cell
    compared: list[str] = field(default_factory=list)  # what beside it was checked against the statement

    @property
    def label(self) -> str:
        return f"signed by {self.principal} ({self.fingerprint})"


def files_in(paths) -> list[Path]:
    """The provenance envelopes among `paths`: given provenance.intoto.jsonl or provenance.json files (the envelope
    beside it), and under given folders those not beside a build record (a record's check covers its own)."""
    out = []
    for path in map(Path, paths):
        if path.is_dir():
            out.extend(
                sorted(
                    p for p in path.rglob(PROVENANCE_ENVELOPE) if p.is_file() and not (p.parent / BUILD_RECORD).exists()
                )
            )
        elif path.name == PROVENANCE_ENVELOPE:
            out.append(path)
        elif path.name == PROVENANCE_FILE:
            out.append(path.with_name(PROVENANCE_ENVELOPE))
    return list(dict.fromkeys(out))


def check(
    envelope: Path,
    allowed_signers: Path,
    revoked: Path | None,
    *,
    site: Path | None = None,
    record: dict | None = None,
) -> CheckedProvenance | signing.VerificationFailure | signing.AttestationInputError:
    """The checked provenance at `envelope`, or why not (a failure: exit 1; unreadable input: exit 2). `record`: the
    validated build record that links it (else a build-record.json beside it, when there is one, is read)."""
    envelope = Path(envelope)
    try:
        if not envelope.is_file():
            return UnsignedProvenance(
                f"no {PROVENANCE_ENVELOPE} at {envelope.parent}: sign the provenance (`envbuild image --sign KEY`, or "
                "`envbuild matrix publish BUILD_RECORD --sign KEY`)"
            )
        verified, statement_bytes = build_provenance.verify(envelope, allowed_signers, revoked)
        statement = verified.statement
        compared = _beside(envelope.parent, statement, statement_bytes, record)
        cell = _cell(statement, site)
        return CheckedProvenance(envelope, verified.principal, verified.fingerprint, statement, cell, compared)
    except (signing.VerificationFailure, signing.AttestationInputError) as exc:
        return exc


def _beside(folder: Path, statement: dict, statement_bytes: bytes, record: dict | None) -> list[str]:
    compared = []
    statement_file = folder / PROVENANCE_FILE
    if statement_file.exists():
        if build_provenance.read_statement(statement_file) != statement_bytes:
            raise ProvenanceMismatch(f"{PROVENANCE_FILE} is not the statement {PROVENANCE_ENVELOPE} signed")
        compared.append(PROVENANCE_FILE)
    sbom_sha = build_provenance.byproduct_sha256(statement)
    sbom_file = folder / SBOM_FILE
    if sbom_sha is not None:
        if not sbom_file.exists():
            raise SbomMismatch(
                f"the provenance names an SBOM (sha256 {sbom_sha[:16]}…), but no {SBOM_FILE} is beside it"
            )
        actual = _bounded_file_sha256(sbom_file, MAX_SBOM_BYTES)
        if actual != sbom_sha:
            raise SbomMismatch(
                f"{SBOM_FILE} (sha256 {actual[:16]}…) is not the SBOM the provenance names ({sbom_sha[:16]}…)"
            )
        compared.append(SBOM_FILE)
    if record is None and (folder / BUILD_RECORD).is_file():
        record = _record_beside(folder / BUILD_RECORD)
    if record is not None:
        _against_record(statement, statement_bytes, sbom_sha, record)
        compared.append(BUILD_RECORD)
    context = folder / CONTEXT_DIR
    if context.is_dir() and not context.is_symlink():
        expected = build_provenance.context_digests(statement)
        actual = build_provenance.context_file_hashes(context)
        if actual != expected:
            changed = sorted(p for p in expected.keys() | actual.keys() if expected.get(p) != actual.get(p))
            raise ProvenanceMismatch(
                f"the build context beside it is not the one the provenance lists: {', '.join(changed[:10])}"
                + (f" and {len(changed) - 10} more" if len(changed) > 10 else "")
            )
        compared.append(f"{len(actual)} context files")
    return compared


def _record_beside(path: Path) -> dict:
    _, parsed = build_signing.read_record(path)
    try:
        return build_record_schema.validate(parsed)
    except build_record_schema.BuildRecordError as exc:
        raise signing.AttestationInputError(f"{path}: not a build record as docs/build-record.md says: {exc}") from None


def _against_record(statement: dict, statement_bytes: bytes, sbom_sha: str | None, record: dict) -> None:
    link = record.get("provenance") or {}
    actual = hashlib.sha256(statement_bytes).hexdigest()
    if link.get("sha256") != actual:
        raise ProvenanceMismatch(
            f"the build record links provenance sha256 {str(link.get('sha256') or '(none)')[:16]}…, not this statement "
            f"({actual[:16]}…)"
        )
    if (record.get("sbom") or {}).get("sha256") != sbom_sha:
        raise SbomMismatch("the build record's SBOM is not the one the provenance names")
    predicate = statement["predicate"]
    image = (record.get("image") or {}).get("digest")
    pairs = (
        ("image", image, "sha256:" + signing.subject_digests(statement)[signing.IMAGE_SUBJECT]),
        ("build id", record.get("build_id"), predicate["runDetails"].get("metadata", {}).get("invocationId")),
        (
            "context hash",
            record.get("context_hash"),
            predicate["buildDefinition"]["externalParameters"].get("context_hash"),
        ),
    )
    for what, in_record, in_statement in pairs:
        if in_record != in_statement:
            raise ProvenanceMismatch(f"the record's {what} {in_record!r} is not the provenance's {in_statement!r}")


def _cell(statement: dict, site: Path | None) -> Cell:
    """The cell recomputed from the statement's request, wheelhouse and context hash."""
    parameters = statement["predicate"]["buildDefinition"]["externalParameters"]
    try:
        request = BuildRequest.model_validate(parameters.get("request")).model_dump()
    except ValidationError as exc:
        raise ProvenanceCell(
            f"the provenance names no request envbuild can render ({exc.error_count()} problems)"
        ) from None
    wheelhouse = parameters.get("wheelhouse")
    context_hash = parameters.get("context_hash")
    if not isinstance(wheelhouse, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in wheelhouse.items()
    ):
        raise ProvenanceCell("the provenance's wheelhouse is not {file: sha256}")
    if not isinstance(context_hash, str):
        raise ProvenanceCell("the provenance names no context hash")
    try:
        cell, rendered = recompute_files(request, wheelhouse, context_hash, site=site)
    except ContextNotRecomputed as exc:
        raise ProvenanceCell(str(exc)) from None
    listed = {p: d for p, d in build_provenance.context_digests(statement).items() if p != MANIFEST_FILE}
    if listed != rendered:
        changed = sorted(p for p in listed.keys() | rendered.keys() if listed.get(p) != rendered.get(p))
        raise ProvenanceCell(
            f"the context files it lists are not the ones the recipes in use render for {cell.key}: "
            + ", ".join(changed[:10])
            + (f" and {len(changed) - 10} more" if len(changed) > 10 else "")
        )
    return cell


def _bounded_file_sha256(path: Path, limit: int) -> str:
    try:
        return hashlib.sha256(strict_json.read_regular(path, limit)).hexdigest()
    except (OSError, ValueError) as exc:
        raise signing.AttestationInputError(f"{path}: {exc}") from None
