"""Signed build records: the same in-toto Statement v1 in a DSSE envelope, signed with an SSH key, as a run's
(builder.attest.signing), with a predicate type of its own, so that a run's attestation never passes for a
build's, nor a build's for a run's.

The statement's subjects are the sha256 of `build-record.json` and, for a passing build, its image (the image id's
digest, as the record names it); its predicate (type `BUILD_PREDICATE_TYPE`) holds the envbuild version, the exact
commands, the build's id, status, failure class and context hash, when it finished and when it was signed. Who
signed comes from results/allowed_signers (signing.verify_envelope); which cell the build was comes from our
recomputation of its context (builder.plan.context_identity, done by the workflows), never from the record.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from builder import strict_json
from builder.attest import signing
from builder.paths import BUILD_RECORD

BUILD_PREDICATE_TYPE = "urn:envbuild:predicate:build:v1"
#: The attestation's file name, next to the build record it covers (in-toto's `<file>.intoto.jsonl` bundle name).
BUILD_ATTESTATION_NAME = f"{BUILD_RECORD}.intoto.jsonl"
#: What a build record may weigh (a failed build's record holds at most 200 lines of its log).
MAX_RECORD_BYTES = 4 << 20


@dataclass(frozen=True)
class VerifiedBuild:
    principal: str
    fingerprint: str
    statement: dict
    envelope: str  # the DSSE envelope, one JSON line


def make_statement(record_bytes: bytes, record: dict, *, commands: list[str], envbuild_version: str) -> dict:
    """The in-toto Statement v1 for the build record `record` (parsed from `record_bytes`)."""
    subjects = [{"name": BUILD_RECORD, "digest": {"sha256": hashlib.sha256(record_bytes).hexdigest()}}]
    image = _image_hex(record)
    if image:
        subjects.append({"name": signing.IMAGE_SUBJECT, "digest": {"sha256": image}})
    failure = record.get("failure") if isinstance(record.get("failure"), dict) else {}
    return {
        "_type": signing.STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": BUILD_PREDICATE_TYPE,
        "predicate": {
            "envbuild_version": envbuild_version,
            "commands": list(commands),
            "build_id": record.get("build_id"),
            "status": record.get("status"),
            "failure_class": failure.get("failure_class"),
            "context_hash": record.get("context_hash"),
            "built_at": record.get("finished_at"),
            "signed_at": signing.utc_now(),
        },
    }


def attest(record_path: Path, key: Path, *, commands: list[str], envbuild_version: str) -> Path:
    """Sign the build record in `record_path` and write its attestation beside it; returns the attestation's path.
    AttestationInputError when the record cannot be read or the key cannot sign."""
    raw, record = read_record(record_path)
    envelope = signing.sign_statement(
        make_statement(raw, record, commands=commands, envbuild_version=envbuild_version), key
    )
    target = Path(record_path).with_name(BUILD_ATTESTATION_NAME)
    signing.write_attestation(envelope, target)
    return target


def read_record(path: Path) -> tuple[bytes, dict]:
    """(bytes, parsed JSON object) of a build record file, read by strict_json (a regular file, bounded)."""
    try:
        raw = strict_json.read_regular(Path(path), MAX_RECORD_BYTES)
        record = strict_json.loads(raw)
    except (OSError, ValueError, RecursionError) as exc:
        raise signing.AttestationInputError(f"{path}: {exc}") from exc
    if not isinstance(record, dict):
        raise signing.AttestationInputError(f"{path}: not a build record (a JSON object)")
    return raw, record


def attestation_beside(record_path: Path) -> Path | None:
    path = Path(record_path).with_name(BUILD_ATTESTATION_NAME)
    return path if path.is_file() else None


def verify(attestation: Path, allowed_signers: Path, revoked: Path | None, record_bytes: bytes) -> VerifiedBuild:
    """Verify the attestation against the build record's bytes `record_bytes` (as the caller read them, so what is
    verified is what the caller goes on to use): the signature checks of a run's, then every subject and the
    predicate's build id, status, failure class and context hash. VerificationFailure / AttestationInputError."""
    envelope = signing.load_envelope(Path(attestation))
    principal, fingerprint, statement = signing.verify_envelope(
        envelope, Path(allowed_signers), revoked, BUILD_PREDICATE_TYPE, BUILD_RECORD
    )
    check_subjects(statement, record_bytes)
    return VerifiedBuild(principal, fingerprint, statement, json.dumps(envelope.to_dict(), sort_keys=True))


def check_subjects(statement: dict, record_bytes: bytes) -> None:
    """The statement covers exactly these record bytes, the image the record names, and what the record says."""
    digests = signing.subject_digests(statement)
    actual = hashlib.sha256(record_bytes).hexdigest()
    if actual != digests[BUILD_RECORD]:
        raise signing.ResultTampered(
            f"sha256 {actual} of {BUILD_RECORD} is not the attested {digests[BUILD_RECORD]}: "
            "the build record changed after it was signed"
        )
    try:
        record = strict_json.loads(record_bytes)
    except ValueError as exc:
        raise signing.AttestationInputError(f"{BUILD_RECORD}: {exc}") from exc
    if not isinstance(record, dict):
        raise signing.AttestationInputError(f"{BUILD_RECORD}: not a build record (a JSON object)")
    predicate = statement["predicate"]
    failure = record.get("failure") if isinstance(record.get("failure"), dict) else {}
    for key, value in (
        ("build_id", record.get("build_id")),
        ("status", record.get("status")),
        ("failure_class", failure.get("failure_class")),
        ("context_hash", record.get("context_hash")),
    ):
        if predicate.get(key) != value:
            raise signing.InvalidStatement(
                f"the statement's {key} {predicate.get(key)!r} is not the record's {value!r}"
            )
    finished = _utc_seconds(record.get("finished_at"))
    if finished is not None and signing.signed_at(statement).timestamp() < finished - signing.CLOCK_SKEW_S:
        raise signing.InvalidStatement(
            f"signed_at {predicate['signed_at']} lies before the build finished ({record['finished_at']})"
        )
    in_record, attested = _image_hex(record), digests.get(signing.IMAGE_SUBJECT)
    if in_record != attested:
        raise signing.ImageDigestMismatch(
            f"the record's image {in_record or '(none)'} is not the attested image {attested or '(none)'}"
        )


def reverify_stored(
    envelope_text: str | None, build_id: str, allowed_signers: Path, revoked: Path | None = None
) -> VerifiedBuild | signing.VerificationFailure:
    """A stored build's attestation checked again against the current signer files (revocation at read time); the
    statement must name the build's id. AttestationInputError for unreadable signer files."""
    try:
        envelope = signing.envelope_from_text(envelope_text or "", "stored attestation")
    except signing.AttestationInputError as exc:
        return signing.InvalidStatement(str(exc))
    try:
        principal, fingerprint, statement = signing.verify_envelope(
            envelope, Path(allowed_signers), revoked, BUILD_PREDICATE_TYPE, BUILD_RECORD
        )
    except signing.VerificationFailure as exc:
        return exc
    if statement["predicate"].get("build_id") != build_id:
        return signing.InvalidStatement(
            f"the stored attestation names build {statement['predicate'].get('build_id')!r}"
        )
    return VerifiedBuild(principal, fingerprint, statement, envelope_text or "")


def _image_hex(record: dict) -> str | None:
    image = record.get("image") if isinstance(record.get("image"), dict) else {}
    digest = image.get("digest")
    if isinstance(digest, str) and digest.startswith("sha256:") and len(digest) == 71:
        return digest[7:]
    return None


def _utc_seconds(value) -> float | None:
    try:
        when = datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ") if isinstance(value, str) else None
    except ValueError:
        return None
    return when.replace(tzinfo=timezone.utc).timestamp() if when else None
