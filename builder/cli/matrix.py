"""`envbuild matrix list | show CELL | import FILE... | export --json | check`: look into and feed the matrix."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from builder.cli.attest import check_result, sign, signer_options, signers, verify
from builder.cli.diff import diff_cells
from builder.cli.output import stdout_console
from builder.cli.paths import writable_output
from builder.cli.publish import publish
from builder.cli.store_options import DatabaseError, db_option, open_store, plain, warn_damaged
from builder.attest import signing as attest
from builder import strict_json
from builder.engine.run_result import RESULT_NAME
from builder.paths import BUILD_RECORD
from builder.store.provenance import Provenance
from builder.store.run_config import VERDICT_LABEL
from builder.store.store import (
    MatrixStore,
    StoreError,
    canonical_json,
    default_db_path,
    read_mergeable,
    validate_result,
)
from builder.store.summary import (
    CellSummary,
    configuration_line,
    environment_line,
    summarize,
    summary_line,
    summary_record,
)

_STYLE = {"pass": "green", "partial": "yellow", "fail": "red", "untested": "dim"}


def _read(db: Path | None, *, with_runs: bool, cell_key: str | None = None) -> list[CellSummary]:
    store = open_store(db, must_exist=True)
    try:
        summaries = summarize(store, with_runs=with_runs, cell_key=cell_key)
        if cell_key is not None and not summaries:
            known = ", ".join(c.key for c in store.cells()) or "none recorded yet"
            raise click.BadParameter(
                f"no cell {plain(cell_key)!r} in the matrix (known: {plain(known)})", param_hint="CELL"
            )
    finally:
        store.close()
    warn_damaged(store)
    return summaries


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
def list_cells(db: Path | None, as_json: bool, wide: bool) -> None:
    """One line per recorded cell: status, runs, flaky, last pass, class / note.

    Earlier environments of a cell (another base image or content hash) and its measurements (runs of
    other configurations: presets, models, speed runs; docs/matrix.md) get lines of their own, with their
    status. On a terminal the table fits its width (--wide: every column); piped, it is plain text,
    columns separated by two spaces, nothing cut."""
    summaries = _read(db, with_runs=False)
    if as_json:
        click.echo(json.dumps([summary_line(s) for s in summaries], indent=2))
        return
    rows = [row for s in summaries for row in _list_rows(s)]
    console = Console()
    if wide or not console.is_terminal:  # every column, nothing cut (lines as long as they need)
        click.echo(_plain_table(_WIDE, rows))
        return
    columns = _NARROW  # one line a row: the flaky marker beside the status, the date of the last pass
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


_WIDE = (
    "cell",
    "status",
    "runs",
    "flaky",
    "last pass",
    "class / note",
    "configuration",
    "builds",
    "attempts",
    "environment",
)
_NARROW = ("cell", "status", "runs", "last pass", "class / note")


def _list_rows(s: CellSummary) -> list[dict]:
    """The cell's line, one per earlier environment and one per measurement configuration (plain strings)."""
    rows = [
        {
            "cell": s.key,
            "status": s.status,
            "runs": str(s.run_count),
            "flaky": "flaky" if s.flaky else "",
            "last pass": s.last_pass_at or "-",
            "class / note": _class_note(s),
            "configuration": configuration_line_label(),
            "builds": str(len(s.builds)),
            "attempts": str(len(s.attempts)),
            "environment": s.environment or "-",
        }
    ]
    for env in s.environments[:-1][::-1]:  # earlier environments: a row each, never a flip
        line = environment_line(s, env)
        rows.append(
            {
                "cell": f"  {s.key}",
                "status": line["status"],
                "runs": str(line["verdicts"]),
                "flaky": "flaky" if line["flaky"] else "",
                "last pass": line["last_pass_at"] or "-",
                "class / note": " ".join(
                    x for x in ("earlier environment:", env, line["failure_class"], line["note"]) if x
                ),
                "configuration": configuration_line_label(),
                "builds": "",
                "attempts": "",
                "environment": env,
            }
        )
    for configuration in s.configurations[::-1]:  # measurements: their own status, never the cell's
        line = configuration_line(s, configuration)
        rows.append(
            {
                "cell": f"  ↳ {configuration}",
                "status": line["status"],
                "runs": str(line["runs"]),
                "flaky": "flaky" if line["flaky"] else "",
                "last pass": "-",
                "class / note": " ".join(x for x in (line["failure_class"], line["note"]) if x) or "-",
                "configuration": configuration,
                "builds": "",
                "attempts": "",
                "environment": line["environment"],
            }
        )
    return [{k: plain(v) for k, v in row.items()} for row in rows]


def configuration_line_label() -> str:
    return f"{VERDICT_LABEL} (verdict)"


def _plain_table(columns: tuple[str, ...], rows: list[dict]) -> str:
    """Columns padded to their widest value, two spaces apart, nothing cut (for pipes and files)."""
    widths = {c: max([len(c), *(len(r[c]) for r in rows)]) for c in columns}
    lines = [[c for c in columns], *([r[c] for c in columns] for r in rows)]
    return "\n".join("  ".join(v.ljust(widths[c]) for c, v in zip(columns, line)).rstrip() for line in lines)


@matrix.command("show")
@click.argument("cell_key", metavar="CELL")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def show(cell_key: str, db: Path | None, as_json: bool) -> None:
    """Everything recorded for one CELL, attempts included.

    CELL is a key from `envbuild matrix list`; verdicts, attempts and their directories are listed."""
    (summary,) = _read(db, with_runs=True, cell_key=cell_key)
    store_dir = (db or default_db_path()).resolve().parent
    if as_json:
        records = [
            dict(zip(("at", "kind", "outcome", "id", "attempt_dir"), row)) for row in _attempt_rows(summary, store_dir)
        ]
        click.echo(json.dumps({**summary_record(summary), "records": records}, indent=2))
        return
    _print_summary(summary, store_dir)


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
    from builder.cli import site_recipes
    from builder.workflows import import_builds

    target = db or default_db_path()
    results, databases, problems = _collect(paths, target)
    record_files = import_builds.files_in(paths)
    if not results and not databases and not problems and not record_files:
        raise click.BadParameter(
            "no result.json, build-record.json or *.db found under the given paths", param_hint="PATHS"
        )
    chosen = signers(allowed_signers, revoked)
    results, unverified, unreadable = _provenances(results, chosen.allowed, chosen.revoked)
    builds, build_unverified, build_unreadable = import_builds.check_all(
        record_files, chosen.allowed, chosen.revoked, site_recipes.folder() if record_files else None
    )
    unverified += [plain(line) for line in build_unverified]
    unreadable += [plain(line) for line in build_unreadable]
    problems += unreadable
    if problems and not skip_invalid:
        raise click.BadParameter(
            "not imported, invalid files:\n  "
            + "\n  ".join(problems)
            + "\n(fix them, or pass --skip-invalid to import the valid ones)",
            param_hint="PATHS",
        )
    if unverified and not skip_invalid:
        click.echo(
            "not imported, attestations that do not verify:\n  "
            + "\n  ".join(unverified)
            + "\n(check them with `envbuild matrix verify`, or pass --skip-invalid to import the others)",
            err=True,
        )
        raise SystemExit(1)
    problems += unverified
    if not results and not databases and not builds:  # --skip-invalid skipped every file: nothing to import
        raise click.BadParameter(
            "nothing imported: every file is invalid:\n  " + "\n  ".join(problems), param_hint="PATHS"
        )
    twice, recorded = _conflicts(target, results, databases, check_recorded=not replace)
    if twice:
        raise click.BadParameter(
            "not imported, the same run_id with different content in the import:\n  "
            + "\n  ".join(twice)
            + "\n(import one of each)",
            param_hint="PATHS",
        )
    if recorded:
        raise click.BadParameter(
            "not imported, runs already recorded with other content:\n  "
            + "\n  ".join(recorded)
            + "\n(pass --replace to overwrite them with the imported ones)",
            param_hint="PATHS",
        )
    counts = {"new": 0, "identical": 0, "replaced": 0}
    builds_added = 0
    store = open_store(target)
    try:
        for file, _ in databases:
            added, outcomes = store.merge_from(file, replace=replace)
            builds_added += added
            for outcome, n in outcomes.items():
                counts[outcome] += n
        for file, result, provenance in results:
            counts[store.record_run(result, source=str(file), replace=replace, provenance=provenance).outcome] += 1
        for build in builds:
            builds_added += import_builds.record(store, build)
    except StoreError as exc:
        raise DatabaseError(f"{exc} (the files before it were imported; run the import again to finish)") from exc
    finally:
        store.close()
    warn_damaged(store)
    for problem in problems:
        click.echo(f"skipped {problem}", err=True)
    click.echo(
        f"imported {counts['new']} new run(s), {counts['identical']} already recorded,"
        f" {counts['replaced']} replaced, {builds_added} new build(s), {len(problems)} skipped"
        f" into {plain(store.path)}"
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
def export(db: Path | None, as_json: bool, output: Path | None) -> None:
    """Every cell with its verdict, builds and runs, as JSON.

    Runs are exported with their full result.json, streamed cell by cell (memory stays small at any size)."""
    if output:
        writable_output(output, "'-o' / '--output'", is_file=True)
    store = open_store(db, must_exist=True)
    try:
        if output:
            with output.open("w", encoding="utf-8") as handle:
                _export(store, handle)
        else:
            _export(store, sys.stdout)
    except OSError as exc:
        raise click.BadParameter(f"cannot write {output} ({exc.strerror})", param_hint="'-o' / '--output'") from None
    finally:
        store.close()
    warn_damaged(store)


def _export(store: MatrixStore, handle) -> None:
    """The matrix as JSON ({"format": "envbuild-matrix", "version": 1, "cells": [...]}), written one cell at a time
    with each run's stored JSON as it is."""
    handle.write('{"format": "envbuild-matrix", "version": 1, "cells": [')
    for n, summary in enumerate(summarize(store, with_runs=False)):
        record = json.dumps(summary_record(summary, with_runs=False), sort_keys=True, indent=2)
        handle.write(
            ("," if n else "")
            + "\n"
            + record[:-2]
            + ',\n  "runs": ['
            + ",\n".join(store.runs_json(summary.key))
            + "]\n}"
        )
    handle.write("\n]}\n")


@matrix.command("check")
@db_option
def check(db: Path | None) -> None:
    """List the rows whose stored JSON does not parse.

    Reads skip such rows with a warning. Exit 1 when there are any."""
    store = open_store(db, must_exist=True)
    try:
        damaged = store.check()
    finally:
        store.close()
    for row in damaged:
        click.echo(plain(row))
    if damaged:
        click.echo(
            f"{len(damaged)} damaged row(s) in {plain(store.path)}: the reads skip them; re-import"
            " their result.json files with --replace, or restore the file from a backup",
            err=True,
        )
        raise SystemExit(1)
    click.echo(f"{plain(store.path)}: integrity ok, every row readable")


def _collect(paths: tuple[Path, ...], target: Path) -> tuple[list, list, list[str]]:
    """(result files with their dicts and bytes, databases with their runs, problems) for an import; reads only."""
    results, databases, problems = [], [], []
    for file in _import_files(paths):
        if file.suffix == ".db":
            if target.exists() and file.resolve() == target.resolve():
                continue
            try:
                _, rows = read_mergeable(file)
                databases.append((file, [row["result"] for row in rows]))
            except (StoreError, ValueError, sqlite3.Error) as exc:
                problems.append(f"{file}: {exc}")
            continue
        try:
            raw = strict_json.read_regular(file, attest.MAX_RESULT_BYTES)
            results.append((file, validate_result(strict_json.loads(raw)), raw))
        except (
            OSError,
            ValueError,
            RecursionError,
        ) as exc:  # InvalidResultError, JSON and UTF-8 errors are ValueErrors
            problems.append(f"{file}: {str(exc) or type(exc).__name__}")
    return results, databases, [plain(p) for p in problems]


def _provenances(results: list, allowed_signers: Path, revoked: Path | None) -> tuple[list, list[str], list[str]]:
    """(file, result, provenance) of each result file whose attestation verifies or that has none; a line for each
    one whose attestation does not verify, and for each one whose attestation cannot be read (bad input)."""
    out, unverified, unreadable = [], [], []
    for file, result, raw in results:
        if attest.attestation_beside(file) is None:
            out.append((file, result, Provenance()))
            continue
        outcome = check_result(file, allowed_signers, revoked, result_bytes=raw)
        if isinstance(outcome, Provenance):
            out.append((file, result, outcome))
        elif isinstance(outcome, attest.VerificationFailure):
            unverified.append(plain(f"{file}: [{outcome.check}] {outcome}"))
        else:
            unreadable.append(plain(f"{file}: {outcome}"))
    return out, unverified, unreadable


def _conflicts(target: Path, results: list, databases: list, *, check_recorded: bool) -> tuple[list, list]:
    """(runs imported twice with different content, runs recorded in `target` with other content); reads only."""
    incoming = [(file, r) for file, runs in databases for r in runs] + [(file, r) for file, r, _ in results]
    seen: dict[str, str] = {}
    twice, recorded = [], []
    for file, result in incoming:
        content = canonical_json(result)
        if seen.setdefault(result["run_id"], content) != content:
            twice.append(f"run {plain(result['run_id'])} ({plain(file)})")
    if check_recorded and target.exists() and target.stat().st_size:
        try:
            store = MatrixStore.peek(target)  # an older schema or a file being created right now is fine
        except StoreError as exc:
            raise DatabaseError(str(exc)) from exc
        if store is not None:
            try:
                recorded = [
                    f"run {plain(r['run_id'])} ({plain(file)}): recorded with other content in {plain(target)}"
                    for file, r in incoming
                    if store.classify_run(r) == "conflict"
                ]
            finally:
                store.close()
    return twice, recorded


def _status(verdict: str) -> Text:
    return Text(verdict, style=_STYLE.get(verdict.split()[0] if verdict else "", ""))


def _class_note(s: CellSummary) -> str:
    return plain(" ".join(x for x in (s.failure_class, s.note) if x) or "-")


def _print_summary(s: CellSummary, store_dir: Path) -> None:
    console = stdout_console()
    console.print(Text.assemble((plain(s.key), "bold"), "  ", _status(s.status), "  ", _class_note(s)))
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
    console.print(Text(plain(f"environment: {s.environment or '-'}  verdict configuration: {VERDICT_LABEL}")))
    for configuration in s.configurations[::-1]:  # measurements: their own status, never the cell's
        line = configuration_line(s, configuration)
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
    for at, kind, outcome, ident, directory in _attempt_rows(s, store_dir):
        records.add_row(Text(plain(at)), kind, Text(plain(outcome)), Text(plain(ident)), Text(plain(directory)))
    console.print(records)


def _attempt_rows(s: CellSummary, store_dir: Path) -> list[tuple[str, str, str, str, str]]:
    """Every build and run of the cell with its outcome and attempt directory, oldest first."""
    rows = []
    for b in s.builds:
        outcome = b["status"] if b["status"] == "pass" else f"fail build:{b['failure_class']}"
        rows.append(
            (
                b["created_at"],
                "build",
                outcome + ("" if b["counts"] else " (attempt)"),
                b["build_uid"],
                _attempt_dir(store_dir, b.get("attempt_dir")),
            )
        )
    for row in s.runs:
        result = row["result"]
        outcome = result["status"] + (f" {result.get('error_class')}" if result["status"] != "pass" else "")
        rows.append(
            (
                result.get("finished_at") or row["recorded_at"],
                "run",
                outcome + ("" if row["counts"] else " (attempt)"),
                result["run_id"],
                _attempt_dir(store_dir, row.get("attempt_dir")),
            )
        )
    return sorted(rows)


def _attempt_dir(store_dir: Path, attempt_dir: str | None) -> str:
    return str(store_dir / attempt_dir) if attempt_dir else "-"


def _import_files(paths: tuple[Path, ...]) -> list[Path]:
    """The files to import: given files as they are, directories searched for result.json and *.db."""
    files = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.name == RESULT_NAME or p.suffix == ".db"))
        elif path.name != BUILD_RECORD:  # a build record is imported by builder.workflows.import_builds
            files.append(path)
    return files


matrix.add_command(diff_cells)  # sub-commands defined in modules of their own
matrix.add_command(publish)
matrix.add_command(sign)
matrix.add_command(verify)
