"""`envbuild matrix list | show CELL | import FILE... | export --json`: look into and feed the matrix."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from builder.cli_paths import writable_output
from builder.matrix import CellSummary, export_data, summarize, summary_line, summary_record
from builder.store import DB_ENV_VAR, MatrixStore, StoreError, default_db_path, validate_result

db_option = click.option(
    "--db", "db", type=click.Path(dir_okay=False, path_type=Path), envvar=DB_ENV_VAR, default=None,
    help=f"Matrix database file [env {DB_ENV_VAR}; default ./envbuild-matrix.db].")

_STYLE = {"pass": "green", "partial": "yellow", "fail": "red", "untested": "dim"}


class MissingInput(click.ClickException):
    """A file the command reads does not exist: bad input, exit code 2."""

    exit_code = 2


def open_store(db: Path | None, *, must_exist: bool = False) -> MatrixStore:
    """The store for a command, or a ClickException saying why it cannot be opened.

    `must_exist`: for commands that only read, a missing file is an error rather than a new empty matrix.
    """
    path = db or default_db_path()
    if must_exist and not path.exists():
        raise MissingInput(
            f"no matrix database at {path}: record a run (`envbuild run workload`), import results"
            f" (`envbuild matrix import`), or point --db / ${DB_ENV_VAR} at an existing one")
    try:
        return MatrixStore.connect(path)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group("matrix")
def matrix() -> None:
    """The compatibility matrix: which (ROCm, torch, arch) cells build, train correctly, how fast."""


@matrix.command("list")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_cells(db: Path | None, as_json: bool) -> None:
    """One line per recorded cell: status (pass / partial / fail), failure class, runs, last pass."""
    store = open_store(db, must_exist=True)
    try:
        summaries = summarize(store)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps([summary_line(s) for s in summaries], indent=2))
        return
    table = Table()
    table.add_column("cell", no_wrap=True)
    for name in ("status", "class / note", "runs", "builds", "last pass"):
        table.add_column(name)
    for s in summaries:
        table.add_row(s.key, f"[{_STYLE[s.status]}]{s.status}[/]", _class_note(s), str(len(s.runs)),
                      str(len(s.builds)), s.last_pass_at or "-")
    Console().print(table)


@matrix.command("show")
@click.argument("cell_key", metavar="CELL")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def show(cell_key: str, db: Path | None, as_json: bool) -> None:
    """Everything recorded for one CELL (a key from `envbuild matrix list`)."""
    store = open_store(db, must_exist=True)
    try:
        summaries = {s.key: s for s in summarize(store)}
    finally:
        store.close()
    if cell_key not in summaries:
        known = ", ".join(summaries) or "none recorded yet"
        raise click.BadParameter(f"no cell {cell_key!r} in the matrix (known: {known})", param_hint="CELL")
    summary = summaries[cell_key]
    if as_json:
        click.echo(json.dumps(summary_record(summary), indent=2))
        return
    _print_summary(summary)


@matrix.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@db_option
@click.option("--skip-invalid", is_flag=True,
              help="Import the valid files and warn about the rest (default: import nothing if any is invalid).")
def import_results(paths: tuple[Path, ...], db: Path | None, skip_invalid: bool) -> None:
    """Import result.json files and matrix databases (*.db, e.g. a CI job's, with its builds).

    A directory (e.g. unpacked CI artifacts) is searched for result.json and *.db files. Idempotent:
    a run (same run_id) or build (same build_uid) already in the matrix is counted, not added again.
    """
    results, databases, problems = [], [], []
    for file in _import_files(paths):
        if file.suffix == ".db":
            databases.append(file)
            continue
        try:
            result = json.loads(file.read_text())
            validate_result(result)
            results.append((file, result))
        except (OSError, ValueError) as exc:  # InvalidResultError and JSONDecodeError are ValueErrors
            problems.append(f"{file}: {exc}")
    if not results and not databases and not problems:
        raise click.BadParameter("no result.json or *.db found under the given paths", param_hint="PATHS")
    if problems and not skip_invalid:
        raise click.BadParameter(
            "not imported, invalid result files:\n  " + "\n  ".join(problems)
            + "\n(fix them, or pass --skip-invalid to import the valid ones)", param_hint="PATHS")
    runs_added = runs_present = builds_added = 0
    store = open_store(db)
    try:
        for file in databases:
            if file.resolve() == store.path.resolve():
                continue
            try:
                added_builds, added_runs = store.merge_from(file)
            except StoreError as exc:
                if not skip_invalid:
                    raise click.BadParameter(f"{file}: {exc}", param_hint="PATHS") from exc
                problems.append(f"{file}: {exc}")
                continue
            builds_added += added_builds
            runs_added += added_runs
        for file, result in results:
            recorded = store.record_run(result, source=str(file))
            runs_added += recorded.inserted
            runs_present += not recorded.inserted
    finally:
        store.close()
    for problem in problems:
        click.echo(f"skipped {problem}", err=True)
    click.echo(f"imported {runs_added} new run(s), {runs_present} already recorded, {builds_added} new build(s),"
               f" {len(problems)} skipped into {store.path}")


@matrix.command("export")
@db_option
@click.option("--json", "as_json", is_flag=True, required=True, help="Export as JSON (the only format).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write to this file instead of stdout.")
def export(db: Path | None, as_json: bool, output: Path | None) -> None:
    """Every cell with its verdict, builds and runs (full result.json), as JSON."""
    if output:
        writable_output(output, "'-o' / '--output'", is_file=True)
    store = open_store(db, must_exist=True)
    try:
        data = export_data(summarize(store))
    finally:
        store.close()
    text = json.dumps(data, indent=2, sort_keys=True)
    if output:
        output.write_text(text + "\n")
    else:
        click.echo(text)


def _class_note(s: CellSummary) -> str:
    return " ".join(x for x in (s.failure_class, s.note) if x) or "-"


def _print_summary(s: CellSummary) -> None:
    console = Console()
    console.print(f"[bold]{s.key}[/]  [{_STYLE[s.status]}]{s.status}[/]  {_class_note(s)}")
    console.print(f"runs: {len(s.runs)}  builds: {len(s.builds)}  last pass: {s.last_pass_at or '-'}"
                  f"  flips: {len(s.flips)}")
    latest = s.latest_run
    if latest:
        image = latest.get("image") or {}
        console.print(f"latest run {latest['run_id']} ({latest['command']}) {latest['status']}"
                      f" at {latest.get('finished_at')}  image {image.get('digest') or image.get('tag') or '-'}")
        probes = Table("probe", "status", "message")
        for p in latest.get("probes") or []:
            probes.add_row(p["name"], p["status"], p.get("message") or "")
        console.print(probes)
    history = Table("at", "verdict", "kind", "class", "note")
    for e in s.events:
        history.add_row(e.at, f"[{_STYLE[e.verdict]}]{e.verdict}[/]", e.kind, e.failure_class or "", e.note)
    console.print(history)


def _import_files(paths: tuple[Path, ...]) -> list[Path]:
    """The files to import: given files as they are, directories searched for result.json and *.db."""
    files = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.name == "result.json" or p.suffix == ".db"))
        else:
            files.append(path)
    return files
