"""`envbuild matrix diff CELL_A CELL_B`: what changed between two cells' runs, differences first."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from builder.cli.errors import workflow_errors
from builder.cli.output import stdout_console
from builder.cli.store_options import db_option
from builder.slug import plain
from builder.workflows.cell_diff import SECTION_TITLES, SECTIONS, DiffRequest, SbomDiff, diff_cells as compare_cells


def _table(section: str, rows: list, key_a: str, key_b: str) -> Table:
    """One section's rows; the note column ("out of limit: A") only where a row has a note (no empty column)."""
    noted = any(row.out_of_limit for row in rows)
    table = Table(title=SECTION_TITLES[section], title_justify="left")
    columns = [("value", "left"), ("A " + key_a, "right"), ("B " + key_b, "right"), ("B/A", "right")]
    for column, justify in columns + ([("note", "left")] if noted else []):
        table.add_column(Text(plain(column)), justify=justify, overflow="fold")
    for row in rows:
        style = "bold" if row.differs else "dim"
        ratio = f"{row.ratio:.3g}" if row.ratio is not None and row.differs else ""
        cells = [
            Text(plain(row.label or row.name), style=style),
            Text(plain(row.a_text)),
            Text(plain(row.b_text)),
            Text(ratio),
        ]
        if noted:
            note = f"out of limit: {row.out_of_limit}" if row.out_of_limit else ""
            cells.append(Text(note, style="red" if note else ""))
        table.add_row(*cells)
    return table


@click.command("diff")
@click.argument("cell_a", metavar="CELL_A")
@click.argument("cell_b", metavar="CELL_B")
@click.option("--preset", help="Compare runs of this preset [default: A's newest run's preset].")
@click.option("--all", "show_all", is_flag=True, help="Also list the rows that are equal.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option(
    "--sbom",
    "sboms",
    is_flag=True,
    help="Compare the SBOMs of the two cells' newest builds instead (CELL_A/CELL_B may also be sbom.cdx.json paths).",
)
@db_option
@workflow_errors(cell_a="CELL_A", cell_b="CELL_B", preset="--preset", cells="CELL_A / CELL_B")
def diff_cells(
    cell_a: str, cell_b: str, preset: str | None, show_all: bool, as_json: bool, sboms: bool, db: Path | None
) -> None:
    """What changed between two cells' newest runs, differences first.

    Versions (every package, driver, kernel, image digest), throughput and memory with ratios B/A, and
    probe values side by side with the side outside its limit, for the newest runs of two cells (the same
    preset on both sides when B has one). With --sbom: every package and pin of the two images' SBOMs, versions
    side by side. Exit code 0, or 2 for an unknown cell or a bad DB."""
    request = DiffRequest(db, cell_a, cell_b, preset, sboms)
    compared = compare_cells(request, notify=lambda line: click.echo(line, err=True))
    if as_json:
        click.echo(json.dumps(compared.as_json(), indent=2, default=str))
        return
    if isinstance(compared, SbomDiff):
        _print_sbom_diff(compared, show_all)
        return
    a, b, rows, prices = compared.a, compared.b, compared.rows, compared.prices
    console = stdout_console(soft_wrap=True)
    console.print(
        Text(
            f"A {plain(cell_a)}: run {plain(a['run_id'])} ({plain(a['preset'])}, {plain(a['status'])}, "
            f"{plain(a['finished_at'])})"
        )
    )
    console.print(
        Text(
            f"B {plain(cell_b)}: run {plain(b['run_id'])} ({plain(b['preset'])}, {plain(b['status'])}, "
            f"{plain(b['finished_at'])})"
        )
    )
    for section in SECTIONS:
        shown = [r for r in rows if r.section == section and (show_all or r.differs)]
        same = sum(1 for r in rows if r.section == section and not r.differs)
        if shown:
            console.print(_table(section, shown, cell_a, cell_b))
        if same and not show_all:
            console.print(Text(f"  {section}: {same} equal row(s) not shown (--all shows them)", style="dim"))
    for label, price in zip("AB", prices):
        if price:
            console.print(
                Text(
                    f"{label}: cost from ${price.usd_per_gpu_hour}/GPU-hour, {price.as_of} ({plain(price.source)})",
                    style="dim",
                )
            )


def _print_sbom_diff(compared: SbomDiff, show_all: bool) -> None:
    console = stdout_console(soft_wrap=True)
    console.print(Text(f"A {plain(compared.label_a)}\nB {plain(compared.label_b)}"))
    rows = compared.rows
    shown = [r for r in rows if show_all or r.differs]
    if shown:
        console.print(_table("sbom", shown, "", ""))
    console.print(
        Text(f"  {sum(r.differs for r in rows)} of {len(rows)} components differ", style="bold" if shown else "dim")
    )
