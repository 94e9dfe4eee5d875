"""`envbuild matrix sign RESULT_JSON --key KEY` and `envbuild matrix verify [PATH...]`: signed results.

The options naming who may sign (`--allowed-signers`, `--revoked`) are shared with `matrix import` and
`report --check`; the work is in builder.attest.signing.
"""

from __future__ import annotations

from pathlib import Path

import click

from builder.cli import site_recipes
from builder.cli.errors import workflow_errors
from builder.slug import plain


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
@workflow_errors()
def sign(result_json: Path, key: Path, commands: tuple[str, ...], sif: Path | None) -> None:
    """Sign a result.json: write result.json.intoto.jsonl beside it.

    An in-toto Statement (subjects: the result's sha256 and its image digest; the commands, hardware and
    time) in a DSSE envelope, signed by `ssh-keygen -Y sign -n envbuild`. Signing again replaces it."""
    from builder.workflows.attestations import SignRequest, sign_result

    click.echo(plain(sign_result(SignRequest(result_json, key, commands, sif))))


@click.command("verify")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@signer_options
@workflow_errors()
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
    from builder.workflows.attestations import VerifyRequest, verify_attestations

    request = VerifyRequest(paths, allowed_signers, revoked, site_recipes.folder())
    verification = verify_attestations(request, notify=lambda line: click.echo(line, err=True))
    for checked in verification.checked:
        word = {"ok": "ok     ", "failed": "FAILED ", "unreadable": "ERROR  "}[checked.outcome]
        click.echo(f"{word} {plain(checked.path)}: {checked.detail}", err=checked.outcome == "unreadable")
    failed, bad = verification.count("failed"), verification.count("unreadable")
    click.echo(f"{len(verification.checked) - failed - bad} verified, {failed} failed, {bad} unreadable", err=True)
    if bad:
        raise SystemExit(2)
    if failed:
        raise SystemExit(1)
