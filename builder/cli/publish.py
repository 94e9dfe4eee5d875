"""`envbuild matrix publish RESULT_JSON --name NAME -o results/`: a measured run, ready to commit.

The repository's `results/` folder holds real runs' result.json files that CI imports into a fresh matrix
to render docs/compatibility.md. A local result.json may hold more about its host than a published one
should (docs/result-schema.md): the host name and the kernel command line are dropped here, the rest is
kept as measured. Files land in `results/<cell key>/<name>/` (the key and name checked as path parts),
with the run's container.log next to it when there is one, and with `--sign KEY` its attestation
(result.json.intoto.jsonl, builder.attest.signing).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import click

from builder.cli.as_found import leaves_as_found, will_create
from builder.cli.attest import sign_options, sign_result
from builder import strict_json
from builder.engine.run_result import RESULT_NAME
from builder.cli.store_options import plain
from builder.known_secrets import MAX_KEPT_LOG, copy_scrubbed
from builder.paths import BUILD_RECORD, CONTAINER_LOG


PRIVATE_HOST_KEYS = ("hostname", "kernel_cmdline")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def publishable(result: dict) -> dict:
    """`result` without the host details a public file must not carry."""
    host = result.get("host")
    if not isinstance(host, dict):
        return result
    return {**result, "host": {k: v for k, v in host.items() if k not in PRIVATE_HOST_KEYS}}


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
    from builder.cli.paths import writable_output
    from builder.store.store import StoreError, validate_result
    from builder.plan.cells import Cell

    if not _NAME.fullmatch(name):
        raise click.BadParameter(f"{name!r}: use letters, digits, '.', '_' and '-' (up to 64)", param_hint="--name")
    if _is_build_record(result_json):
        _publish_build(result_json, name, out, key, commands)
        return
    try:
        result = validate_result(strict_json.loads(strict_json.read_regular(result_json, strict_json.MAX_RESULT_BYTES)))
        cell = Cell.from_result(result)
    except (OSError, ValueError, StoreError, RecursionError) as exc:
        raise click.BadParameter(f"{result_json}: {exc}", param_hint="RESULT_JSON") from exc
    if key is not None and not commands:
        raise click.UsageError("give the exact commands that made this result with --command (repeat it)")
    target = out / cell.key / name
    if target.exists():
        raise click.UsageError(f"{target} exists already: choose another --name")
    writable_output(target, "'-o' / '--out'")
    will_create(target)
    target.mkdir(parents=True)
    try:
        (target / RESULT_NAME).write_text(json.dumps(publishable(result), indent=2, sort_keys=True) + "\n")
        log = result_json.with_name(CONTAINER_LOG)
        if log.is_symlink():  # a link would publish whatever it points at
            click.echo(f"warning: {log} is a symbolic link; not published", err=True)
        elif log.is_file() and not copy_scrubbed(log, target / CONTAINER_LOG, MAX_KEPT_LOG):
            click.echo(f"warning: {log} is not a regular file of at most {MAX_KEPT_LOG} bytes; not published", err=True)
        if key is not None:
            click.echo(str(sign_result(target / RESULT_NAME, key, commands, sif)))
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    click.echo(str(target / RESULT_NAME))


def _is_build_record(path: Path) -> bool:
    """Whether FILE declares itself a build record (its name, or its `format`); read bounded, parsed leniently: the
    door (verify_build.read) checks it whole."""
    from builder.store import build_record_schema

    if path.name == BUILD_RECORD:
        return True
    try:
        return build_record_schema.is_build_record(
            strict_json.loads(strict_json.read_regular(path, strict_json.MAX_RESULT_BYTES))
        )
    except (OSError, ValueError, RecursionError):
        return False


def _publish_build(record: Path, name: str, out: Path, key: Path | None, commands: tuple[str, ...]) -> None:
    from builder.cli import site_recipes
    from builder.cli.paths import writable_output
    from builder.workflows import publish_build

    if key is not None and not commands:
        raise click.UsageError("give the exact commands that made this build with --command (repeat it)")
    try:
        prepared = publish_build.prepare(record, site_recipes.folder())
    except publish_build.PublishError as exc:
        raise click.BadParameter(plain(exc), param_hint="FILE") from exc
    target = out / prepared.cell.key / name
    if target.exists():
        raise click.UsageError(f"{target} exists already: choose another --name")
    writable_output(target, "'-o' / '--out'")
    will_create(target)
    try:
        written, attestation = publish_build.write(prepared, target, key, commands)
    except publish_build.PublishError as exc:
        raise click.UsageError(plain(exc)) from exc
    if attestation is not None:
        click.echo(plain(attestation))
    click.echo(plain(written))
