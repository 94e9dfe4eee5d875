"""`envbuild matrix sign RESULT_JSON --key KEY` and `envbuild matrix verify [PATH...]`: signed results.

The options naming who may sign (`--allowed-signers`, `--revoked`) are shared with `matrix import` and
`report --check`; the work is in builder.attest.signing.
"""

from __future__ import annotations

from pathlib import Path

import click

from builder import __version__
from builder.cli.store_options import plain
from builder.attest import signing as attest
from builder import strict_json
from builder.store.provenance import Provenance


def signer_options(command):
    """--allowed-signers and --revoked, defaulting to results/allowed_signers and results/revoked_signers."""
    command = click.option(
        "--revoked",
        "revoked",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Revoked keys (public keys, one a line, or an OpenSSH KRL) [default: results/revoked_signers "
        "when it exists].",
    )(command)
    return click.option(
        "--allowed-signers",
        "allowed_signers",
        type=click.Path(dir_okay=False, path_type=Path),
        default=attest.ALLOWED_SIGNERS,
        show_default="results/allowed_signers",
        help="OpenSSH allowed_signers file: who may sign results (namespaces, valid-after/valid-before).",
    )(command)


def revoked_or_default(revoked: Path | None) -> Path | None:
    if revoked is not None:
        return revoked
    return attest.REVOKED_SIGNERS if attest.REVOKED_SIGNERS.is_file() else None


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
def verify(paths: tuple[Path, ...], allowed_signers: Path, revoked: Path | None) -> None:
    """Check the attestations of published results.

    Default: every result.json under results/.

    PATHS: result.json files, attestations or folders (searched for result.json). Each result needs its
    result.json.intoto.jsonl: a valid signature by a key in --allowed-signers, valid when it signed, not revoked,
    namespace envbuild, an in-toto payload, and subjects that match the files. Exit 0 when all verify,
    1 when one fails (the check is named), 2 for bad input (a missing or unparseable file)."""
    revoked = revoked_or_default(revoked)
    failed = bad = 0
    pairs = list(result_files(paths or (attest.RESULTS_DIR,)))
    if not pairs:
        raise click.UsageError("no result.json found under the given paths")
    for result_json in pairs:
        outcome = check_result(result_json, allowed_signers, revoked)
        if isinstance(outcome, Provenance):
            click.echo(f"ok      {plain(result_json)}: {plain(outcome.label)}")
        elif isinstance(outcome, attest.VerificationFailure):
            failed += 1
            click.echo(f"FAILED  {plain(result_json)}: [{outcome.check}] {plain(outcome)}")
        else:
            bad += 1
            click.echo(f"ERROR   {plain(result_json)}: {plain(outcome)}", err=True)
    click.echo(f"{len(pairs) - failed - bad} verified, {failed} failed, {bad} unreadable", err=True)
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
