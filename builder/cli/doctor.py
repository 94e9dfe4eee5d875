"""`envbuild doctor`: host preflight for GPU containers, as a table or as JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from builder.cli import site_recipes
from builder.workflows.doctor import DoctorRequest, check_host

_STYLE = {"pass": "green", "warn": "yellow", "fail": "red"}


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print the host record as JSON (what each run carries).")
@click.option(
    "--root",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("/"),
    show_default=True,
    help="Read /sys, /proc, /dev and /etc below this directory (for tests).",
)
@click.option(
    "--flavor",
    type=click.Choice(["auto", "rocm", "cpu"]),
    default="auto",
    show_default=True,
    help="rocm: a missing GPU, driver or device access is a failure; auto: only when an AMD driver is present.",
)
@click.option("--no-engine", is_flag=True, help="Skip the Docker engine and BuildKit checks.")
def doctor(as_json: bool, root: Path, flavor: str, no_engine: bool) -> None:
    """Check this host for GPU containers: kernel, amdgpu driver, /dev/kfd and /dev/dri access, GPU
    archs, iommu=pt on multi-GPU hosts, Docker engine, BuildKit. Exit code 1 when a check fails."""
    host = check_host(DoctorRequest(root, flavor, not no_engine, site_recipes.folder()))
    record = host.record
    if as_json:
        click.echo(json.dumps(record, indent=2))
    else:
        table = Table(title=f"envbuild doctor ({record['kernel'] or 'unknown kernel'})")
        for column in ("check", "status", "detail", "fix"):
            table.add_column(column, overflow="fold")
        for check in record["checks"]:
            style = _STYLE[check["status"]]
            table.add_row(check["name"], f"[{style}]{check['status']}[/]", check["detail"], check["hint"])
        Console().print(table)
        if record.get("gpu_archs"):
            click.echo(measure_path(record["gpu_archs"]))  # never wrapped: lines to copy
    sys.exit(1 if host.failed else 0)


def measure_path(archs: list[str]) -> str:
    """The shortest path from the environment an AMD GPU owner already has to a signed result (CONTRIBUTING.md)."""
    arch = archs[0]
    return "\n".join(
        [
            f"Measure the environment you already have on this {arch} host (no build; CONTRIBUTING.md):",
            f"  envbuild run workload --image rocm/pytorch:TAG --gpus all --out run-{arch}    # a Docker image",
            f"  envbuild run workload --apptainer PYTORCH.sif --out run-{arch}                # or a SIF (LUMI's)",
            f"  envbuild run workload --local --out run-{arch}                                # or this venv's torch",
            f"  envbuild matrix publish run-{arch}/result.json --name {arch}-smoke --sign ~/.ssh/id_ed25519 \\",
            "      --command 'THE RUN COMMAND ABOVE, AS YOU RAN IT'",
            "The workload and the packages an image lacks come in read-only; the probes name the cell.",
        ]
    )
