"""`envbuild matrix diff CELL_A CELL_B`: what changed between two cells' runs, differences first."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from builder.cli.output import stdout_console
from builder.cli.store_options import db_option, open_store, plain, warn_damaged
from builder.report import diff


def _table(section: str, rows: list[diff.Row], key_a: str, key_b: str) -> Table:
    """One section's rows; the note column ("out of limit: A") only where a row has a note (no empty column)."""
    noted = any(row.out_of_limit for row in rows)
    table = Table(title=diff.SECTION_TITLES[section], title_justify="left")
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
def diff_cells(
    cell_a: str, cell_b: str, preset: str | None, show_all: bool, as_json: bool, sboms: bool, db: Path | None
) -> None:
    """What changed between two cells' newest runs, differences first.

    Versions (every package, driver, kernel, image digest), throughput and memory with ratios B/A, and
    probe values side by side with the side outside its limit, for the newest runs of two cells (the same
    preset on both sides when B has one). With --sbom: every package and pin of the two images' SBOMs, versions
    side by side. Exit code 0, or 2 for an unknown cell or a bad DB."""
    if sboms:
        _sbom_diff(cell_a, cell_b, show_all, as_json, db)
        return
    store = open_store(db, must_exist=True)
    try:
        runs = {}
        for label, key in (("CELL_A", cell_a), ("CELL_B", cell_b)):
            found = [r["result"] for r in reversed(store.runs(key))]
            if not found:
                known = ", ".join(c.key for c in store.cells()) or "none recorded yet"
                raise click.BadParameter(f"no runs of {plain(key)!r} in the matrix (cells: {known})", param_hint=label)
            runs[key] = found
        warn_damaged(store)
    finally:
        store.close()
    try:
        result_a, result_b = diff.pick_runs(runs[cell_a], runs[cell_b], preset)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--preset") from exc
    from builder.report import gpu_prices  # reads recipes/ (pydantic): only when the command runs

    prices = [gpu_prices.price_for(r) for r in (result_a, result_b)]
    a, b = (diff.profile(r, p.usd_per_gpu_hour if p else None) for r, p in zip((result_a, result_b), prices))
    if as_json:
        click.echo(json.dumps(diff.as_json(a, b), indent=2, default=str))
        return
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
    rows = diff.compare(a, b)
    for section in diff.SECTIONS:
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


def _sbom_diff(cell_a: str, cell_b: str, show_all: bool, as_json: bool, db: Path | None) -> None:
    from dataclasses import asdict

    from builder.workflows import sbom_diff

    store = open_store(db, must_exist=True)
    path = store.path
    store.close()
    try:
        label_a, label_b, rows = sbom_diff.rows(path, cell_a, cell_b)
    except sbom_diff.SbomDiffError as exc:
        raise click.BadParameter(plain(exc), param_hint="CELL_A / CELL_B") from exc
    if as_json:
        click.echo(json.dumps({"a": label_a, "b": label_b, "rows": [asdict(r) for r in rows]}, indent=2))
        return
    console = stdout_console(soft_wrap=True)
    console.print(Text(f"A {plain(label_a)}\nB {plain(label_b)}"))
    shown = [r for r in rows if show_all or r.differs]
    if shown:
        console.print(_table("sbom", shown, "", ""))
    console.print(
        Text(f"  {sum(r.differs for r in rows)} of {len(rows)} components differ", style="bold" if shown else "dim")
    )
