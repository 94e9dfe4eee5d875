"""`envbuild sif IMAGE -o PATH.sif`: an image built by `envbuild image`, as a SIF for Apptainer sites."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape


class BadInput(click.ClickException):
    exit_code = 2


@click.command("sif")
@click.argument("image")
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              metavar="PATH.sif", help="Where the SIF goes; its record is written beside it as PATH.sif.json.")
def sif(image: str, out: Path) -> None:
    """Convert a built image into a SIF (docker save -> apptainer build) and verify it inside Apptainer.

    The SIF's sha256, the image's tag, digest and manifest, and the outcome of the image's own verify step
    (run again inside the SIF) go into PATH.sif.json, which `run workload --apptainer` and `slurm submit`
    read. Exit code 0 when the SIF verified; 1 when the verify step failed inside it (the SIF and its record
    are kept, with `verify.ok: false`); 2 for bad input (unknown image, no apptainer, an existing SIF)."""
    from builder.engine.apptainer import build_sif
    from builder.engine.container import RunError
    from builder.engine.docker import EngineUnavailable

    console = Console(stderr=True, soft_wrap=True)
    if not out.name.endswith(".sif"):
        raise BadInput(f"-o {out}: the SIF's file name must end in .sif")
    if out.exists():
        raise BadInput(f"-o {out}: exists already (SIFs are never overwritten); pick another path or remove it")
    try:
        record = build_sif(image, out, console)
    except RunError as exc:
        raise BadInput(str(exc)) from exc
    except EngineUnavailable as exc:
        raise BadInput(str(exc)) from exc
    verify, timings = record["verify"], record["timings"]
    line = (f"{out} sha256 {record['sha256']} ({record['size_bytes'] / 1e6:.0f} MB); docker save "
            f"{timings['docker_save_s']} s, apptainer build {timings['apptainer_build_s']} s, "
            f"verify {timings['verify_s']} s")
    if verify["ok"]:
        console.print(escape(f"verified inside the SIF ({verify['checks']} checks): {line}"))
        click.echo(str(out))
        return
    console.print(f"[red]the image's verify step failed inside the SIF[/] (exit code {verify['exit_code']}):")
    console.print(escape(verify["output_tail"]))
    console.print(escape(f"kept for inspection: {line}"))
    sys.exit(1)
