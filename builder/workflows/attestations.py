"""Signed results and build records: who may sign (`signers`: the files --allowed-signers and --revoked name, or their
defaults), a result.json signed (`sign_result`), one checked (`check_result`), and `envbuild matrix verify`
(`verify_attestations`: every result, build record and image provenance under the given paths, each build's cell
recomputed).
The signing itself is builder.attest.signing and build_signing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from builder import __version__, strict_json
from builder.attest import build_signing, signing as attest
from builder.paths import BUILD_RECORD, PROVENANCE_ENVELOPE, PROVENANCE_FILE
from builder.slug import plain
from builder.store.provenance import Provenance
from builder.workflows import import_builds, verify_build, verify_provenance
from builder.workflows.errors import BadRequest
from workload.result import RESULT_FILE

#: The working folder's signer file: in a clone of the repository, the one a contributor's own key line goes into.
WORKING_SIGNERS = Path("results") / "allowed_signers"


@dataclass(frozen=True)
class Signers:
    """The signer files a command checks attestations against, and where they came from."""

    allowed: Path
    revoked: Path | None
    source: str


def signers(allowed_signers: Path | None, revoked: Path | None, notify: Callable[[str], None]) -> Signers:
    """The files --allowed-signers and --revoked name, or their defaults: ./results/allowed_signers when the
    working folder has one, else the bundled results/allowed_signers; revoked_signers beside it when it exists.
    Which files are used is said to `notify`."""
    if allowed_signers is not None:
        source = "--allowed-signers"
    elif WORKING_SIGNERS.is_file():
        allowed_signers, source = WORKING_SIGNERS, "the working folder's results/"
    else:
        allowed_signers, source = (
            attest.ALLOWED_SIGNERS,
            "bundled with this envbuild; no ./results/allowed_signers here",
        )
    if revoked is None:
        beside = Path(allowed_signers).with_name("revoked_signers")
        revoked = beside if beside.is_file() else None
    notify(f"signers: {plain(allowed_signers)} ({source})" + (f", revoked: {plain(revoked)}" if revoked else ""))
    return Signers(Path(allowed_signers), revoked, source)


@dataclass(frozen=True)
class SignRequest:
    result_json: Path
    key: Path  # an SSH private key, or a public key whose private half is in ssh-agent
    commands: tuple[str, ...]  # the exact commands that made the result, in order
    sif: Path | None  # the SIF the run used: its sha256 becomes a signed subject


def sign_result(request: SignRequest) -> Path:
    """Write the result's attestation beside it and return its path; no commands, or a result or key that cannot
    sign, are a BadRequest."""
    if not request.commands:
        raise BadRequest("give the exact commands that made this result with --command (repeat it)")
    try:
        return attest.attest(
            request.result_json,
            request.key,
            commands=list(request.commands),
            envbuild_version=__version__,
            sif_path=request.sif,
        )
    except attest.AttestationInputError as exc:
        raise BadRequest(plain(exc)) from exc


class Unsigned(attest.VerificationFailure):
    check = "unsigned"


def check_result(
    result_json: Path, allowed_signers: Path, revoked: Path | None, result_bytes: bytes | None = None
) -> Provenance | attest.VerificationFailure | attest.AttestationInputError:
    """The provenance of a verified result, or why it did not verify (a failure, or bad input)."""
    if result_bytes is None:
        try:
            result_bytes = strict_json.read_regular(Path(result_json), attest.MAX_RESULT_BYTES)
        except FileNotFoundError:
            return attest.AttestationInputError("no such result file")
        except (OSError, ValueError) as exc:
            return attest.AttestationInputError(f"the result file: {exc}")
    attestation = attest.attestation_beside(result_json)
    if attestation is None:
        return Unsigned(f"no {attest.ATTESTATION_NAME} beside it: sign it (`envbuild matrix sign`)")
    try:
        verified = attest.verify(
            attestation, allowed_signers, revoked, result_path=result_json, result_bytes=result_bytes
        )
    except (attest.VerificationFailure, attest.AttestationInputError) as exc:
        return exc
    return Provenance.signed(verified.principal, verified.fingerprint, verified.envelope)


def result_files(paths) -> list[Path]:
    """result.json files: given ones, the one beside a given attestation, every one under a given folder."""
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob(RESULT_FILE) if p.is_file()))
        elif path.name == attest.ATTESTATION_NAME:
            files.append(path.with_name(RESULT_FILE))
        else:
            files.append(path)
    return files


@dataclass(frozen=True)
class VerifyRequest:
    paths: tuple[Path, ...]  # files or folders (none: ./results)
    allowed_signers: Path | None
    revoked: Path | None
    site: Path | None  # a site's recipe folder over the packaged one (a build record's cell is recomputed with it)


@dataclass(frozen=True)
class Checked:
    path: Path
    outcome: str  # ok | failed | unreadable
    detail: str  # what verified (who signed; a build record's cell), or why not (the check that failed)


@dataclass(frozen=True)
class Verification:
    checked: tuple[Checked, ...]

    def count(self, outcome: str) -> int:
        return sum(c.outcome == outcome for c in self.checked)


def verify_attestations(request: VerifyRequest, notify: Callable[[str], None]) -> Verification:
    """Every result.json and build-record.json under the paths checked against the signer files (said to
    `notify`); no ./results folder to default to, or nothing to check, is a BadRequest."""
    paths = request.paths
    if not paths:
        if not Path("results").is_dir():
            raise BadRequest(
                "no ./results folder here: run it in a clone of the envbuild repository, or give the result files "
                "or folders to check (e.g. `envbuild matrix verify results/<cell>/<name>`)"
            )
        paths = (Path("results"),)
    chosen = signers(request.allowed_signers, request.revoked, notify)
    results = result_files(paths)
    builds = import_builds.files_in(paths) + [
        p.with_name(BUILD_RECORD) for p in map(Path, paths) if p.name == build_signing.BUILD_ATTESTATION_NAME
    ]
    provenances = verify_provenance.files_in(paths)
    skipped = (BUILD_RECORD, build_signing.BUILD_ATTESTATION_NAME, PROVENANCE_FILE, PROVENANCE_ENVELOPE)
    results = [r for r in results if r.name not in skipped]
    if not results and not builds and not provenances:
        raise BadRequest("no result.json, build-record.json or provenance.intoto.jsonl found under the given paths")
    outcomes = [(r, check_result(r, chosen.allowed, chosen.revoked)) for r in results]
    site = request.site if builds or provenances else None
    for record in builds:
        outcomes.append(
            (record, verify_build.check(record, chosen.allowed, chosen.revoked, require_signature=True, site=site))
        )
    for envelope in provenances:
        outcomes.append((envelope, verify_provenance.check(envelope, chosen.allowed, chosen.revoked, site=site)))
    return Verification(tuple(_as_checked(path, outcome) for path, outcome in outcomes))


def _as_checked(path: Path, outcome) -> Checked:
    if isinstance(outcome, verify_build.CheckedBuild):
        return Checked(
            path,
            "ok",
            f"{plain(outcome.provenance.label)}; build of {outcome.cell.key} ({outcome.record['status']}), its "
            "context recomputed by the recipes in use"
            + (f"; linked and checked: {plain(', '.join(outcome.linked))}" if outcome.linked else ""),
        )
    if isinstance(outcome, verify_provenance.CheckedProvenance):
        return Checked(
            path,
            "ok",
            f"{plain(outcome.label)}; provenance of a build of {outcome.cell.key}, its context recomputed; checked "
            f"against it: {plain(', '.join(outcome.compared) or 'nothing beside it')}",
        )
    if isinstance(outcome, Provenance):
        return Checked(path, "ok", plain(outcome.label))
    if isinstance(outcome, attest.VerificationFailure):
        return Checked(path, "failed", f"[{outcome.check}] {plain(outcome)}")
    return Checked(path, "unreadable", plain(outcome))
