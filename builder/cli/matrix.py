"""`envbuild matrix list | show CELL | import FILE... | export --json | check`: look into and feed the matrix."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from builder.cli import site_recipes
from builder.cli.attest import sign, signer_options, verify
from builder.cli.diff import diff_cells
from builder.cli.errors import workflow_errors
from builder.cli.output import stdout_console
from builder.cli.paths import writable_output
from builder.cli.publish import publish
from builder.cli.store_options import db_option
from builder.slug import plain

_STYLE = {"pass": "green", "partial": "yellow", "fail": "red", "untested": "dim"}


def _warn(line: str) -> None:
    click.echo(line, err=True)


@click.group("matrix")
def matrix() -> None:
    """The compatibility matrix: which (ROCm, torch, arch) cells build, train correctly, how fast."""


@matrix.command("list")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--wide",
    is_flag=True,
    help="Every column (builds, attempts, configuration, environment), plain "
    "and uncut, on a terminal too (piped output always is).",
)
@workflow_errors()
def list_cells(db: Path | None, as_json: bool, wide: bool) -> None:
    """One line per recorded cell: status, runs, flaky, last pass, class / note.

    Earlier environments of a cell (another base image or content hash) and its measurements (runs of
    other configurations: presets, models, speed runs; docs/matrix.md) get lines of their own, with their
    status. On a terminal the table fits its width (--wide: every column); piped, it is plain text,
    columns separated by two spaces, nothing cut."""
    from builder.workflows.matrix_views import NARROW_COLUMNS, WIDE_COLUMNS, list_cells as read_cells

    cells = read_cells(db, notify=_warn)
    if as_json:
        click.echo(json.dumps(cells.lines, indent=2))
        return
    rows = cells.rows
    console = Console()
    if wide or not console.is_terminal:  # every column, nothing cut (lines as long as they need)
        click.echo(_plain_table(WIDE_COLUMNS, rows))
        return
    columns = NARROW_COLUMNS  # one line a row: the flaky marker beside the status, the date of the last pass
    rows = [
        {**row, "status": f"{row['status']} {row['flaky']}".strip(), "last pass": row["last pass"][:10]} for row in rows
    ]
    # every column but the note as wide as its values; the note takes the rest of the line, cut with …
    widths = {c: max([len(c), *(len(row[c]) for row in rows)]) for c in columns}
    widths["class / note"] = max(
        12, console.width - sum(w for c, w in widths.items() if c != "class / note") - 2 * len(columns)
    )
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True)
    for name in columns:
        table.add_column(name, no_wrap=True, overflow="ellipsis", width=widths[name])
    for row in rows:
        table.add_row(*(_status(row[c]) if c == "status" else Text(row[c]) for c in columns))
    console.print(table)


def _plain_table(columns: tuple[str, ...], rows: list[dict]) -> str:
    """Columns padded to their widest value, two spaces apart, nothing cut (for pipes and files)."""
    widths = {c: max([len(c), *(len(r[c]) for r in rows)]) for c in columns}
    lines = [[c for c in columns], *([r[c] for c in columns] for r in rows)]
    return "\n".join("  ".join(v.ljust(widths[c]) for c, v in zip(columns, line)).rstrip() for line in lines)


@matrix.command("show")
@click.argument("cell_key", metavar="CELL")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@workflow_errors(cell_key="CELL")
def show(cell_key: str, db: Path | None, as_json: bool) -> None:
    """Everything recorded for one CELL, attempts included.

    CELL is a key from `envbuild matrix list`; verdicts, attempts and their directories are listed."""
    from builder.workflows.matrix_views import show_cell

    record = show_cell(db, cell_key, notify=_warn)
    if as_json:
        click.echo(json.dumps(record.as_json(), indent=2))
        return
    _print_summary(record)


@matrix.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@db_option
@click.option(
    "--skip-invalid",
    is_flag=True,
    help="Import the valid files and warn about the rest (default: import nothing if any is invalid).",
)
@click.option(
    "--replace",
    is_flag=True,
    help="A run_id already recorded with other content is overwritten (default: refused, nothing imported).",
)
@signer_options
@workflow_errors(paths="PATHS")
def import_results(
    paths: tuple[Path, ...],
    db: Path | None,
    skip_invalid: bool,
    replace: bool,
    allowed_signers: Path | None,
    revoked: Path | None,
) -> None:
    """Import result.json files, build records and matrix databases.

    Databases (*.db, e.g. a CI job's) come with their builds.

    A directory (e.g. unpacked CI artifacts) is searched for result.json, build-record.json and *.db files.
    Idempotent: a run (same run_id, same content) or build (same build_uid) already in the matrix is counted, not
    added again; the same run_id with other content is refused unless --replace.

    A result.json or build-record.json with its .intoto.jsonl beside it is verified first (`envbuild matrix
    verify`) and recorded with its provenance (this project's CI, or the contributor who signed it); one without
    is recorded as unsigned. A build record is filed under the cell its context recomputes to with the recipes in
    use, never the one it names. Runs from databases come in unsigned. Exit 1 when an attestation or a build
    record's cell does not verify (nothing imported), 2 on bad input.
    """
    from builder.workflows.import_results import ImportRequest, import_results as import_files

    request = ImportRequest(paths, db, skip_invalid, replace, allowed_signers, revoked, site_recipes.folder())
    imported = import_files(request, notify=_warn)
    for problem in imported.skipped:
        click.echo(f"skipped {problem}", err=True)
    counts = imported.runs
    click.echo(
        f"imported {counts['new']} new run(s), {counts['identical']} already recorded,"
        f" {counts['replaced']} replaced, {imported.builds_added} new build(s), {len(imported.skipped)} skipped"
        f" into {plain(imported.path)}"
    )


@matrix.command("export")
@db_option
@click.option("--json", "as_json", is_flag=True, required=True, help="Export as JSON (the only format).")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write to this file instead of stdout.",
)
@workflow_errors(output="'-o' / '--output'")
def export(db: Path | None, as_json: bool, output: Path | None) -> None:
    """Every cell with its verdict, builds and runs, as JSON.

    Runs are exported with their full result.json, streamed cell by cell (memory stays small at any size)."""
    if output:
        writable_output(output, "'-o' / '--output'", is_file=True)
    from builder.workflows.matrix_views import export_matrix

    export_matrix(db, output, sys.stdout, notify=_warn)


@matrix.command("check")
@db_option
@workflow_errors()
def check(db: Path | None) -> None:
    """List the rows whose stored JSON does not parse.

    Reads skip such rows with a warning. Exit 1 when there are any."""
    from builder.workflows.matrix_views import check_matrix

    checked = check_matrix(db)
    for row in checked.damaged:
        click.echo(row)
    if checked.damaged:
        click.echo(
            f"{len(checked.damaged)} damaged row(s) in {plain(checked.path)}: the reads skip them; re-import"
            " their result.json files with --replace, or restore the file from a backup",
            err=True,
        )
        raise SystemExit(1)
    click.echo(f"{plain(checked.path)}: integrity ok, every row readable")


def _status(verdict: str) -> Text:
    return Text(verdict, style=_STYLE.get(verdict.split()[0] if verdict else "", ""))


def _print_summary(record) -> None:
    """Everything recorded for one cell (the workflow's CellRecord), as text."""
    s = record.summary
    console = stdout_console()
    console.print(Text.assemble((plain(s.key), "bold"), "  ", _status(s.status), "  ", record.class_note))
    console.print(
        Text(
            f"runs: {s.run_count}  builds: {len(s.builds)}  last pass: {plain(s.last_pass_at or '-')}"
            f"  flips: {len(s.flips)}" + ("  flaky" if s.flaky else "")
        )
    )
    latest = s.latest_run
    if latest:
        image = latest.get("image") or {}
        console.print(
            Text(
                plain(
                    f"latest run {latest['run_id']} ({latest['command']}) {latest['status']}"
                    f" at {latest.get('finished_at')}  image {image.get('digest') or image.get('tag') or '-'}"
                )
            )
        )
        probes = Table("probe", "status", "message")
        for p in latest.get("probes") or []:
            probes.add_row(Text(plain(p["name"])), _status(p["status"]), Text(plain(p.get("message") or "")))
        console.print(probes)
    console.print(Text(plain(f"environment: {s.environment or '-'}  verdict configuration: {record.verdict_label}")))
    for configuration, line in record.measurements:  # measurements: their own status, never the cell's
        console.print(
            Text.assemble(
                plain(f"measurement {configuration}: "),
                _status(line["status"]),
                plain(
                    f"  runs: {line['runs']}"
                    + ("  flaky" if line["flaky"] else "")
                    + (f"  {line['failure_class']}" if line["failure_class"] else "")
                ),
            )
        )
    history = Table("at", "verdict", "kind", "configuration", "class", "note", "environment")
    for e in s.events:
        verdict = e.verdict if e.decides or not e.counts else f"measurement: {e.verdict}"
        history.add_row(
            Text(plain(e.at)),
            _status(verdict),
            e.kind,
            Text(plain(e.configuration if e.kind == "run" else "")),
            Text(plain(e.failure_class or "")),
            Text(plain(e.note)),
            Text(plain(e.environment)),
        )
    console.print(history)
    records = Table("at", "kind", "outcome", "id", "attempt directory", title="every build and run, with its record")
    for at, kind, outcome, ident, directory in record.attempts:
        records.add_row(Text(plain(at)), kind, Text(plain(outcome)), Text(plain(ident)), Text(plain(directory)))
    console.print(records)


matrix.add_command(diff_cells)  # sub-commands defined in modules of their own
matrix.add_command(publish)
matrix.add_command(sign)
matrix.add_command(verify)
