"""`envbuild matrix publish RESULT_JSON --name NAME -o results/`: a measured run or a build record, ready to commit
(builder.workflows.publish: what is dropped from a public result, where it lands)."""

from __future__ import annotations

from pathlib import Path

import click

from builder.as_found import leaves_as_found
from builder.cli import site_recipes
from builder.cli.attest import sign_options
from builder.cli.errors import workflow_errors
from builder.slug import plain


@click.command("publish")
@click.argument("result_json", metavar="FILE", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", required=True, help="Name of this run in the results folder, e.g. local-seed-tiny-gemma.")
@click.option(
    "-o",
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results"),
    show_default=True,
    help="The results folder.",
)
@click.option(
    "--sign",
    "key",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Sign it with this SSH key (private key, or public key with the private half in ssh-agent): "
    "writes result.json.intoto.jsonl beside it.",
)
@sign_options
@leaves_as_found
@workflow_errors(name="--name", result_json="RESULT_JSON", record="FILE", out="'-o' / '--out'")
def publish(
    result_json: Path, name: str, out: Path, key: Path | None, commands: tuple[str, ...], sif: Path | None
) -> None:
    """Copy a measured run or a build record into results/ for committing.

    FILE is a run's result.json or a build's build-record.json (`envbuild image` writes it into the build's
    attempt directory and says where). A result (and its container.log) goes to OUT/<cell>/<NAME>/ without the
    host name and kernel command line, which a public file must not carry. A build record goes there as it is,
    under the cell its context recomputes to with the recipes in use (one they do not render is refused). With
    --sign, the attestation (exact commands from --command) goes beside it. Exit code 0, or 2 for an invalid file,
    a bad name, an existing entry or a key that cannot sign (nothing is left behind)."""
    from builder.workflows.publish import PublishRequest, publish as publish_file

    request = PublishRequest(result_json, name, out, key, commands, sif, site_recipes.folder())
    published = publish_file(request, notify=lambda line: click.echo(line, err=True))
    if published.attestation is not None:
        click.echo(plain(published.attestation))
    click.echo(plain(published.written))
