"""`envbuild matrix import`: result.json files, build records and matrix databases into the matrix. Every file passes
its door first (the result schema, its attestation when one lies beside it, a build record's cell recomputed), then
nothing or everything valid is written (`import_results`). `collect_files` and `with_provenances` are shared with the
report, which shows the published results beside the local matrix."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from builder import strict_json
from builder.attest import signing as attest
from builder.paths import BUILD_RECORD
from builder.slug import plain
from builder.store.provenance import Provenance
from builder.store.store import MatrixStore, StoreError, canonical_json, read_mergeable, validate_result
from builder.workflows import import_builds
from builder.workflows.attestations import check_result, signers
from builder.workflows.errors import BadInput, BadValue, Stopped
from builder.workflows.matrix_file import damage_warnings, db_path, open_store
from workload.result import RESULT_FILE


@dataclass(frozen=True)
class ImportRequest:
    paths: tuple[Path, ...]  # files and folders (searched for result.json, build-record.json and *.db)
    db: Path | None
    skip_invalid: bool  # import the valid files, name the rest
    replace: bool  # a run_id recorded with other content is overwritten
    allowed_signers: Path | None
    revoked: Path | None
    site: Path | None  # a site's recipe folder over the packaged one (a build record's cell is recomputed with it)


@dataclass(frozen=True)
class Imported:
    runs: dict  # {"new": n, "identical": n, "replaced": n}
    builds_added: int
    skipped: tuple[str, ...]  # a line per file left out (--skip-invalid)
    path: Path  # the matrix file


def import_results(request: ImportRequest, notify: Callable[[str], None]) -> Imported:
    """Import what the paths hold. Invalid files, runs imported twice or recorded with other content, and nothing to
    import are a BadValue of `paths` (nothing imported); an attestation that does not verify stops it (exit code 1,
    nothing imported) unless `skip_invalid`; a matrix that refuses a write is BadInput (the files before it are in)."""
    target = db_path(request.db)
    results, databases, problems = collect_files(request.paths, target)
    record_files = import_builds.files_in(request.paths)
    if not results and not databases and not problems and not record_files:
        raise BadValue("no result.json, build-record.json or *.db found under the given paths", "paths")
    chosen = signers(request.allowed_signers, request.revoked, notify)
    results, unverified, unreadable = with_provenances(results, chosen.allowed, chosen.revoked)
    builds, build_unverified, build_unreadable = import_builds.check_all(
        record_files, chosen.allowed, chosen.revoked, request.site if record_files else None
    )
    unverified += [plain(line) for line in build_unverified]
    unreadable += [plain(line) for line in build_unreadable]
    problems += unreadable
    if problems and not request.skip_invalid:
        raise BadValue(
            "not imported, invalid files:\n  "
            + "\n  ".join(problems)
            + "\n(fix them, or pass --skip-invalid to import the valid ones)",
            "paths",
        )
    if unverified and not request.skip_invalid:
        raise Stopped(
            "not imported, attestations that do not verify:\n  "
            + "\n  ".join(unverified)
            + "\n(check them with `envbuild matrix verify`, or pass --skip-invalid to import the others)",
            1,
        )
    problems += unverified
    if not results and not databases and not builds:  # --skip-invalid skipped every file: nothing to import
        raise BadValue("nothing imported: every file is invalid:\n  " + "\n  ".join(problems), "paths")
    _refuse_conflicts(target, results, databases, check_recorded=not request.replace)
    return _write_imports(request, target, results, databases, builds, problems, notify)


def _refuse_conflicts(target: Path, results: list, databases: list, *, check_recorded: bool) -> None:
    twice, recorded = _conflicts(target, results, databases, check_recorded=check_recorded)
    if twice:
        raise BadValue(
            "not imported, the same run_id with different content in the import:\n  "
            + "\n  ".join(twice)
            + "\n(import one of each)",
            "paths",
        )
    if recorded:
        raise BadValue(
            "not imported, runs already recorded with other content:\n  "
            + "\n  ".join(recorded)
            + "\n(pass --replace to overwrite them with the imported ones)",
            "paths",
        )


def _write_imports(
    request: ImportRequest,
    target: Path,
    results: list,
    databases: list,
    builds: list,
    problems: list[str],
    notify: Callable[[str], None],
) -> Imported:
    counts = {"new": 0, "identical": 0, "replaced": 0}
    builds_added = 0
    store = open_store(target, notify=notify)
    try:
        for file, _ in databases:
            added, outcomes = store.merge_from(file, replace=request.replace)
            builds_added += added
            for outcome, n in outcomes.items():
                counts[outcome] += n
        for file, result, provenance in results:
            recorded = store.record_run(result, source=str(file), replace=request.replace, provenance=provenance)
            counts[recorded.outcome] += 1
        for build in builds:
            builds_added += import_builds.record(store, build)
    except StoreError as exc:
        raise BadInput(f"{exc} (the files before it were imported; run the import again to finish)") from exc
    finally:
        store.close()
    for line in damage_warnings(store):
        notify(line)
    return Imported(counts, builds_added, tuple(problems), store.path)


def collect_files(paths, target: Path) -> tuple[list, list, list[str]]:
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


def with_provenances(results: list, allowed_signers: Path, revoked: Path | None) -> tuple[list, list[str], list[str]]:
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
            raise BadInput(str(exc)) from exc
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


def _import_files(paths) -> list[Path]:
    """The files to import: given files as they are, directories searched for result.json and *.db."""
    files = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.name == RESULT_FILE or p.suffix == ".db"))
        elif path.name != BUILD_RECORD:  # a build record is imported by builder.workflows.import_builds
            files.append(path)
    return files
