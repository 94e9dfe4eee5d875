"""`envbuild matrix sign RESULT_JSON --key KEY` and `envbuild matrix verify [PATH...]`: signed results.

The options naming who may sign (`--allowed-signers`, `--revoked`) are shared with `matrix import` and
`report --check`; the work is in builder.attest.signing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from builder import __version__
from builder.cli.store_options import plain
from builder.attest import build_signing, signing as attest
from builder import strict_json
from builder.paths import BUILD_RECORD, PROVENANCE_ENVELOPE, PROVENANCE_FILE
from builder.store.provenance import Provenance


#: The working folder's signer file: in a clone of the repository, the one a contributor's own key line goes into.
WORKING_SIGNERS = Path("results") / "allowed_signers"


def signer_options(command):
    """--allowed-signers and --revoked: by default the working folder's results/allowed_signers when there is one
    (a clone, where a contributor adds their key), else the one bundled with this envbuild (`signers`)."""
    command = click.option(
        "--revoked",
        "revoked",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Revoked keys (public keys, one a line, or an OpenSSH KRL) [default: revoked_signers beside the "
        "allowed_signers file, when it exists].",
    )(command)
    return click.option(
        "--allowed-signers",
        "allowed_signers",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        show_default="./results/allowed_signers when it exists, else the file bundled with envbuild",
        help="OpenSSH allowed_signers file: who may sign results (namespaces, valid-after/valid-before).",
    )(command)


@dataclass(frozen=True)
class Signers:
    """The signer files a command checks attestations against, and where they came from (said on stderr)."""

    allowed: Path
    revoked: Path | None
    source: str


def signers(allowed_signers: Path | None, revoked: Path | None) -> Signers:
    """The files --allowed-signers and --revoked name, or their defaults: ./results/allowed_signers when the
    working folder has one, else the bundled results/allowed_signers; revoked_signers beside it when it exists.
    Says on stderr which file is used."""
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
    click.echo(
        f"signers: {plain(allowed_signers)} ({source})" + (f", revoked: {plain(revoked)}" if revoked else ""),
        err=True,
    )
    return Signers(Path(allowed_signers), revoked, source)


def sign_options(command):
    """--command (repeatable) and --sif, the parts of a signed statement the signer supplies."""
    command = click.option(
        "--sif",
        "sif",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help="The SIF image the run used: its sha256 becomes a signed subject.",
    )(command)
    return click.option(
        "--command",
        "commands",
        multiple=True,
        metavar="CMD",
        help="An exact command you ran to make this result, in order (repeat it; required).",
    )(command)


def sign_result(result_json: Path, key: Path, commands: tuple[str, ...], sif: Path | None) -> Path:
    """Write the attestation beside `result_json`; bad input raises click errors (exit 2)."""
    if not commands:
        raise click.UsageError("give the exact commands that made this result with --command (repeat it)")
    try:
        return attest.attest(result_json, key, commands=list(commands), envbuild_version=__version__, sif_path=sif)
    except attest.AttestationInputError as exc:
        raise click.UsageError(plain(exc)) from exc


@click.command("sign")
@click.argument("result_json", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--key",
    "key",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="SSH private key, or a public key whose private half is in ssh-agent.",
)
@sign_options
def sign(result_json: Path, key: Path, commands: tuple[str, ...], sif: Path | None) -> None:
    """Sign a result.json: write result.json.intoto.jsonl beside it.

    An in-toto Statement (subjects: the result's sha256 and its image digest; the commands, hardware and
    time) in a DSSE envelope, signed by `ssh-keygen -Y sign -n envbuild`. Signing again replaces it."""
    click.echo(plain(sign_result(result_json, key, commands, sif)))


@click.command("verify")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@signer_options
def verify(paths: tuple[Path, ...], allowed_signers: Path | None, revoked: Path | None) -> None:
    """Check the attestations of published results, build records and images' build provenance.

    Default: every result.json and build-record.json under ./results (a clone's results folder).

    PATHS: result.json or build-record.json files, their attestations, an image's provenance.intoto.jsonl (`envbuild
    image --sign` writes it), or folders (searched for all three). A build record that links an SBOM and provenance
    needs them beside it, each the file it links, the provenance signed. Each needs
    its .intoto.jsonl beside it: a valid signature by a key in --allowed-signers, valid when it signed, not revoked,
    namespace envbuild, an in-toto payload, and subjects that match the files; a build record's context must also
    be one the recipes in use render (its cell is recomputed, never read from it). Exit 0 when all verify,
    1 when one fails (the check is named), 2 for bad input (no ./results, a missing or unparseable file)."""
    from builder.cli import site_recipes
    from builder.workflows import import_builds, verify_build, verify_provenance

    if not paths:
        if not Path("results").is_dir():
            raise click.UsageError(
                "no ./results folder here: run it in a clone of the envbuild repository, or give the result files "
                "or folders to check (e.g. `envbuild matrix verify results/<cell>/<name>`)"
            )
        paths = (Path("results"),)
    chosen = signers(allowed_signers, revoked)
    results = result_files(paths)
    builds = import_builds.files_in(paths) + [
        p.with_name(BUILD_RECORD) for p in map(Path, paths) if p.name == build_signing.BUILD_ATTESTATION_NAME
    ]
    provenances = verify_provenance.files_in(paths)
    results = [
        r
        for r in results
        if r.name not in (BUILD_RECORD, build_signing.BUILD_ATTESTATION_NAME)
        and r.name not in (PROVENANCE_FILE, PROVENANCE_ENVELOPE)
    ]
    if not results and not builds and not provenances:
        raise click.UsageError(
            "no result.json, build-record.json or provenance.intoto.jsonl found under the given paths"
        )
    failed = bad = 0
    outcomes = [(r, check_result(r, chosen.allowed, chosen.revoked)) for r in results]
    site = site_recipes.folder() if builds or provenances else None
    for record in builds:
        outcomes.append(
            (record, verify_build.check(record, chosen.allowed, chosen.revoked, require_signature=True, site=site))
        )
    for envelope in provenances:
        outcomes.append((envelope, verify_provenance.check(envelope, chosen.allowed, chosen.revoked, site=site)))
    for path, outcome in outcomes:
        if isinstance(outcome, verify_build.CheckedBuild):
            click.echo(
                f"ok      {plain(path)}: {plain(outcome.provenance.label)}; build of {outcome.cell.key}"
                f" ({outcome.record['status']}), its context recomputed by the recipes in use"
                + (f"; linked and checked: {plain(', '.join(outcome.linked))}" if outcome.linked else "")
            )
        elif isinstance(outcome, verify_provenance.CheckedProvenance):
            click.echo(
                f"ok      {plain(path)}: {plain(outcome.label)}; provenance of a build of {outcome.cell.key}, its "
                f"context recomputed; checked against it: {plain(', '.join(outcome.compared) or 'nothing beside it')}"
            )
        elif isinstance(outcome, Provenance):
            click.echo(f"ok      {plain(path)}: {plain(outcome.label)}")
        elif isinstance(outcome, attest.VerificationFailure):
            failed += 1
            click.echo(f"FAILED  {plain(path)}: [{outcome.check}] {plain(outcome)}")
        else:
            bad += 1
            click.echo(f"ERROR   {plain(path)}: {plain(outcome)}", err=True)
    click.echo(f"{len(outcomes) - failed - bad} verified, {failed} failed, {bad} unreadable", err=True)
    if bad:
        raise SystemExit(2)
    if failed:
        raise SystemExit(1)


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
            files.extend(sorted(p for p in path.rglob(attest.RESULT_NAME) if p.is_file()))
        elif path.name == attest.ATTESTATION_NAME:
            files.append(path.with_name(attest.RESULT_NAME))
        else:
            files.append(path)
    return files
