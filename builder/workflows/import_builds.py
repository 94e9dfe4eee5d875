"""`envbuild matrix import` (and the report's published results) for build records: each one checked at the door
(verify_build.check: schema, attestation, the cell recomputed from its context) and recorded as a build of that
cell with its record and provenance. A record without an attestation comes in unsigned, as a result.json does. The
SBOM and provenance a record links are kept in an attempt folder of the imported build, for the report to link."""

from __future__ import annotations

import shutil
from pathlib import Path

from builder.attest import signing
from builder.paths import BUILD_RECORD
from builder.store.attempts import new_attempt, relative_to_db
from builder.store.store import MatrixStore
from builder.workflows import build_evidence, verify_build
from builder.workflows.verify_build import CheckedBuild


def files_in(paths) -> list[Path]:
    """The build records among `paths`: given files named build-record.json, and those under given folders."""
    out = []
    for path in map(Path, paths):
        if path.is_dir():
            out.extend(sorted(p for p in path.rglob(BUILD_RECORD) if p.is_file()))
        elif path.name == BUILD_RECORD:
            out.append(path)
    return out


def check_all(
    files: list[Path], allowed_signers: Path, revoked: Path | None, site: Path | None = None
) -> tuple[list[CheckedBuild], list[str], list[str]]:
    """(records that passed the door, a line for each whose attestation or cell does not verify, a line for each
    that cannot be read)."""
    checked, unverified, unreadable = [], [], []
    for file in files:
        outcome = verify_build.check(file, allowed_signers, revoked, require_signature=False, site=site)
        if isinstance(outcome, CheckedBuild):
            checked.append(outcome)
        elif isinstance(outcome, signing.VerificationFailure):
            unverified.append(f"{file}: [{outcome.check}] {outcome}")
        else:
            unreadable.append(f"{file}: {outcome}")
    return checked, unverified, unreadable


def record(store: MatrixStore, build: CheckedBuild) -> bool:
    """Record one checked build record under its recomputed cell; True when the build is new to the store (a build
    already recorded unsigned with the same record takes the signature). StoreError passes through."""
    rec = build.record
    new = not store.has_build(rec["build_id"])
    failure = rec.get("failure") or {}
    attempt_dir = _keep_linked(store.path, build) if new else None
    store.record_build(
        build.cell,
        status=rec["status"],
        failure_class=failure.get("failure_class"),
        error=(f"{failure.get('step')}: {failure.get('message')}"[:500] if failure else None),
        recipe_hash=rec.get("recipe_hash"),
        context_hash=rec["context_hash"],
        image_tag=rec.get("image_tag"),
        image_digest=(rec.get("image") or {}).get("digest"),
        duration_s=rec.get("wall_time_s"),
        created_at=rec["finished_at"],
        build_uid=rec["build_id"],
        base_image=rec["base"].get("image"),
        base_digest=rec["base"].get("digest"),
        record=rec,
        provenance=build.provenance,
        attempt_dir=attempt_dir,
    )
    return new


def _keep_linked(db: Path, build: CheckedBuild) -> str | None:
    """An attempt folder for an imported build holding the SBOM and provenance its record links (copied from beside
    the record, each checked against its sha256), so that the report can publish them; None when it links none or
    they cannot be copied (the build is imported all the same)."""
    if not (build.record.get("sbom") or build.record.get("provenance")):
        return None
    directory = new_attempt(db, "build", build.record["build_id"])
    try:
        build_evidence.copy_linked(build.record, build.path.parent, directory)
    except (signing.AttestationInputError, OSError):
        shutil.rmtree(directory, ignore_errors=True)
        return None
    return relative_to_db(db, directory)
