"""`envbuild inspect TARGET`: which GPU archs an image's (or a file's) code objects cover.

TARGET is a file or directory on this machine (every library in it counts), or an image reference. For an
image, the scan runs inside it (workload.binaries.code_object_reader, standard library only) over torch/lib and the
ROCm lib dirs, the legacy /opt/rocm/lib and TheRock's /opt/rocm/core-<version>/lib (workload.binaries.rocm_layout):
the verdict is about what torch loads (its own libraries and, through DT_NEEDED, the ROCm libraries they
name); a library nothing torch loads that lacks the arch is a note. The image's own verify record
(/opt/envbuild/verify.json, written at the end of its build) is shown too.
"""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from builder.cli.errors import workflow_errors

EXIT_MISSING = 1
_HINT = (
    "a kernel launched on that arch fails with 'HIP error: invalid device function' "
    "(or 'no kernel image is available'): build or pick an image for it (--arch)"
)


def _print(cov: dict, verify: dict | None, console: Console) -> None:
    table = Table(title="GPU code objects", show_lines=False)
    for column in ("file or library dir", "archs", "bundles"):
        table.add_column(column)
    for b in cov["binaries"]:
        compressed = f" + {b['compressed_bundles']} compressed (not decoded)" if b["compressed_bundles"] else ""
        table.add_row(escape(b["path"]), escape(", ".join(b["targets"]) or "-"), f"{b['bundles']}{compressed}")
    for directory, counts in cov["library_files"].items():
        table.add_row(escape(directory), escape(", ".join(f"{a} ({n} files)" for a, n in counts.items()) or "-"), "")
    other = cov.get("not_loaded") or {"binaries": [], "library_files": {}, "missing_in": []}
    for b in other["binaries"]:
        table.add_row(
            escape(b["path"]) + " [dim](not loaded by torch)[/]",
            escape(", ".join(b["targets"]) or "-"),
            str(b["bundles"]),
        )
    for directory, counts in other["library_files"].items():
        table.add_row(
            escape(directory) + " [dim](not loaded by torch)[/]",
            escape(", ".join(f"{a} ({n} files)" for a, n in counts.items()) or "-"),
            "",
        )
    console.print(table)
    if verify is not None:
        failed = [c for c in verify.get("checks", []) if not c.get("ok")]
        state = "[green]passed[/]" if verify.get("ok") else "[red]failed[/]"
        console.print(f"build verify step: {state} ({len(verify.get('checks', []))} checks)")
        for check in failed:
            console.print(f"  FAIL {escape(str(check.get('name')))}: {escape(str(check.get('detail')))}")
    arch, verdict = cov.get("arch"), cov["verdict"]
    if arch is None:
        console.print(f"archs found: {escape(', '.join(cov['archs']) or 'none')} (pass --arch to check one)")
    elif verdict == "present":
        where = "torch loads" if "not_loaded" in cov else "found"
        console.print(f"[green]{escape(arch)}: present[/] in every GPU binary and kernel library {where}")
    elif verdict == "missing":
        console.print(f"[red]{escape(arch)}: MISSING[/] in {escape(', '.join(cov['missing_in']))}")
        console.print(f"  {_HINT}")
    else:
        console.print(f"[yellow]{escape(arch)}: unknown[/]: no readable GPU code objects were found")
    if arch is not None and other["missing_in"]:
        console.print(
            f"note: {escape(arch)} is missing in {escape(', '.join(other['missing_in']))}, which torch does not load"
        )


@click.command("inspect")
@click.argument("target")
@click.option("--arch", help="GPU arch that must be covered, e.g. gfx90a [default: the image's arch label].")
@click.option("--json", "as_json", is_flag=True, help="Print the coverage as JSON.")
@workflow_errors()
def inspect(target: str, arch: str | None, as_json: bool) -> None:
    """List the GPU archs an image's or a file's code objects cover, and say whether --arch is missing.

    Reads clang offload bundles (HIP fat binaries such as libtorch_hip.so) and per-arch rocBLAS/hipBLASLt
    kernel files; needs no GPU. Exit code 0 covered (or no --arch), 1 missing or unknown, 2 bad input."""
    from builder.workflows.inspect import InspectRequest, inspect_target

    found = inspect_target(InspectRequest(target, arch))
    if as_json:
        click.echo(json.dumps({**found.coverage, "verify": found.verify}, indent=2))
    else:
        _print(found.coverage, found.verify, Console(soft_wrap=True))
    if found.missing:
        sys.exit(EXIT_MISSING)
