"""`envbuild sif`: a cell's SIF for Apptainer/SingularityCE sites, with its record: from a built Docker image
(`IMAGE`), from a rendered context's cell.def with no Docker engine (`--from-context DIR`), or pulled (`--pull`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from builder.cli.errors import workflow_errors
from builder.slug import escaped, plain, terminal_safe
from builder.workflows.sif import COMPRESSIONS, SifNotMade, SifRequest, ToolLine, make_sif


@click.command("sif")
@click.argument("image", required=False)
@click.option(
    "--from-context",
    "context_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Build the cell.def of this rendered context (`envbuild render -o DIR`) with `apptainer build "
    "--fakeroot`: no Docker engine.",
)
@click.option(
    "--pull",
    "source",
    metavar="SOURCE",
    help="Pull an image envbuild built: docker://REF (a registry), docker-archive:FILE.tar (`docker save`) "
    "or FILE.sif; its verify step runs again inside.",
)
@click.option(
    "--base",
    "base_path",
    type=click.Path(path_type=Path),
    help="With --from-context: the base from this machine instead of the registry the definition names: "
    "a SIF or sandbox directory (Bootstrap: localimage) or a `docker save` tar (docker-archive).",
)
@click.option(
    "--ca-cert",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --from-context: CA bundle of a TLS-intercepting proxy, bound read-only at "
    "/run/secrets/envbuild_ca during the build (never copied into the SIF).",
)
@click.option(
    "--fakeroot/--no-fakeroot",
    default=True,
    show_default=True,
    help="With --from-context: build as a fake root user (unprivileged); --no-fakeroot where the build runs as root.",
)
@click.option(
    "--compression",
    type=click.Choice(COMPRESSIONS),
    default=None,
    help="The SIF's squashfs compressor (an IMAGE or --from-context) [default: Apptainer's, gzip]; lz4/zstd "
    "build much faster, for a larger file.",
)
@click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    metavar="PATH.sif",
    help="Where the SIF goes; its record is written beside it as PATH.sif.json.",
)
@workflow_errors()
def sif(
    image: str | None,
    context_dir: Path | None,
    source: str | None,
    base_path: Path | None,
    ca_cert: Path | None,
    fakeroot: bool,
    compression: str | None,
    out: Path,
) -> None:
    """Make a cell's SIF (from an image, a context's cell.def or a pull) and verify it inside Apptainer.

    SingularityCE works too: $ENVBUILD_APPTAINER names the binary, else `apptainer`, else `singularity` on PATH
    is used. IMAGE: a built image (docker save -> apptainer build). --from-context DIR: the context's cell.def, built
    where there is no Docker. --pull SOURCE: an image built elsewhere. The SIF's sha256, how it was made
    (`route`), the plan's content hash (the same as the Docker image of the same request), the runtime and its
    version and the outcome of the image's own verify step (run again inside the SIF) go into PATH.sif.json,
    which `run workload --apptainer` and `slurm submit` read. Exit code 0 when the SIF verified; 1 when the
    build failed or the verify step failed inside it (the SIF and its record are kept, with `verify.ok:
    false`); 2 for bad input (unknown image or context, no apptainer, an existing SIF)."""
    console = Console(stderr=True, soft_wrap=True)
    request = SifRequest(image, context_dir, source, base_path, ca_cert, fakeroot, compression, out)
    made = make_sif(request, lambda event: _show_sif_event(event, console))
    if isinstance(made, SifNotMade):
        console.print(f"[red]{escape(terminal_safe(made.message))}[/]")  # its tail is Apptainer's output
        sys.exit(1)
    record = made.record
    verify, timings = record["verify"], record["timings"]
    steps = ", ".join(f"{name.removesuffix('_s').replace('_', ' ')} {seconds} s" for name, seconds in timings.items())
    line = (
        f"{out} sha256 {record['sha256']} ({record['size_bytes'] / 1e6:.0f} MB, {record['route']} route, "
        f"{record['runtime']['version_line']}); {steps}"
    )
    if made.verified:
        console.print(escape(f"verified inside the SIF ({verify['checks']} checks): {line}"))
        click.echo(str(out))
        return
    console.print(f"[red]the image's verify step failed inside the SIF[/] (exit code {verify['exit_code']}):")
    console.print(escape(escaped(verify["output_tail"], lines=True)))  # the image's own output
    console.print(escape(f"kept for inspection: {line}"))
    sys.exit(1)


def _show_sif_event(event: object, console: Console) -> None:
    """What runs (a line of ours), or a line Apptainer printed during the build (dim), as it happens (stderr)."""
    if isinstance(event, ToolLine):
        console.print(f"[dim]{escape(plain(event.text))}[/]")
    else:
        console.print(escape(plain(event)))
