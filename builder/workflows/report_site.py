"""`envbuild report`: the compatibility report, a static offline site (builder.report.site) and its summary as
markdown, from the local matrix with the project's published results (results/) merged in a scratch copy (the local
file is never written). Who signed each run and build record is derived again from the current signer files
(revocation at read time); `published` leaves out what is unsigned; `check` compares a committed summary and checks
that every committed result carries an attestation that verifies."""

from __future__ import annotations

import tempfile
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from builder.attest import signing as attest
from builder.attest.provenance_now import current_build_provenance, current_provenance
from builder.plan.recipe_cells import RecipeCellsError, recipe_cells
from builder.report.matrix_reads import ReadsAhead
from builder.report.site import PAGE_RUNS, ReportError, build_report, summary_markdown
from builder.slug import plain
from builder.store.store import MatrixStore, RunConflictError, StoreError
from builder.store.summary import VERDICTS, summarize
from builder.workflows import import_builds, verify_build
from builder.workflows.attestations import check_result, result_files, signers
from builder.workflows.errors import BadRecipeData, BadRequest, Stopped
from builder.workflows.import_results import collect_files, with_provenances
from builder.workflows.matrix_file import damage_warnings, db_path, open_store


@dataclass(frozen=True)
class ReportRequest:
    out_dir: Path | None  # the site's folder (new, empty, or a previous report, replaced whole)
    markdown: Path | None  # the summary's file
    check: bool  # write nothing; compare the summary file, check the committed results' attestations
    db: Path | None
    with_recipes: bool  # every cell the recipes define, 'untested' where nothing is recorded
    published: bool  # leave out unsigned runs
    results_dir: Path | None  # the published results (None: ./results when it exists, else the bundled ones)
    with_published: bool  # include the published results
    allowed_signers: Path | None
    revoked: Path | None
    host_details: bool  # each run's full host record
    site: Path | None  # a site's recipe folder over the packaged one: its cells, routes and locks on the pages


@dataclass(frozen=True)
class SiteWritten:
    """An event: the site is written (told before the summary file is)."""

    index: Path
    cells: int
    counts: str  # "N pass, N partial, N fail, N untested"


@dataclass(frozen=True)
class Summary:
    """What became of the markdown summary: "wrote" or "up to date" (a stale one under `check` Stopped, exit 1)."""

    path: Path
    state: str


def write_report(
    request: ReportRequest, notify: Callable[[object], None], status: Callable[[str], AbstractContextManager]
) -> Summary | None:
    """Write the site and/or the summary. `notify` gets warning lines (and the signers used) and SiteWritten;
    `status(text)` wraps each long step. Recipe data that does not validate is BadRecipeData; an unreadable
    attestation or a site that cannot be written where asked is a BadRequest; under `check`, a committed result
    without an attestation that verifies Stopped (exit code 1, 2 when one cannot be read)."""
    try:
        cells = recipe_cells(every=True, site=request.site) if request.with_recipes else []
    except RecipeCellsError as exc:
        raise BadRecipeData(f"{exc} (or pass --no-recipes)") from exc
    chosen = signers(request.allowed_signers, request.revoked, notify)
    results_dir = request.results_dir
    if results_dir is None:
        results_dir = Path("results") if Path("results").is_dir() else attest.RESULTS_DIR
    if request.check:
        _check_results(results_dir, chosen.allowed, chosen.revoked, request.site, notify)
    merged = None
    if request.with_published and not request.check and request.markdown is None:  # the summary: the local matrix's
        merged = tempfile.TemporaryDirectory(prefix="envbuild-report-")
        store = with_results(
            request.db,
            results_dir,
            chosen.allowed,
            chosen.revoked,
            Path(merged.name),
            request.site,
            lambda message: notify(f"warning: {plain(message)}"),
        )
    else:
        store = open_store(request.db, must_exist=True)
    try:
        return _write_report(request, store, cells, chosen, notify, status)
    finally:
        if merged is not None:
            merged.cleanup()


def _write_report(request: ReportRequest, store: MatrixStore, cells: list, chosen, notify, status) -> Summary | None:
    try:  # who signed each run and build record, derived again from the current signer files
        now = current_provenance(store, chosen.allowed, chosen.revoked)
        builds_now = current_build_provenance(store, chosen.allowed, chosen.revoked)
    except attest.AttestationInputError as exc:
        store.close()
        raise BadRequest(plain(exc)) from exc
    scratch = None
    if request.published:
        scratch = tempfile.TemporaryDirectory(prefix="envbuild-published-")
        try:
            store.copy_published(Path(scratch.name) / "published.db", now, builds_now)
        finally:
            store.close()
        store = open_store(Path(scratch.name) / "published.db", must_exist=True)
    else:
        store.provenance_now, store.build_provenance_now = now, builds_now
    site_wanted = request.out_dir is not None and not request.check
    # the site's whole-matrix reads run on the other core while the summaries are collected
    reads = ReadsAhead(store) if site_wanted else None
    try:
        with status("collecting the matrix"):
            summaries = summarize(store, cells, runs_per_cell=PAGE_RUNS, with_manifests=False)
        text = None
        if request.markdown is not None:
            newest = max((r["result"].get("finished_at") or "" for r in store.runs(last=1)), default="") or "-"
            text = summary_markdown(
                summaries,
                f"from runs up to {newest}",
                speed=store.newest_of_preset("speed"),
                site_recipes=request.site,
            )
        index = None
        if site_wanted:
            with status("writing the site"):
                index = build_report(
                    store,
                    summaries,
                    request.out_dir,
                    host_details=request.host_details,
                    attempts_db=db_path(request.db),
                    reads=reads,
                    site_recipes=request.site,
                    warn=lambda message: notify(f"warning: {plain(message)}"),
                )
    except ReportError as exc:
        raise BadRequest(str(exc)) from exc
    finally:
        store.close()
        if scratch is not None:
            scratch.cleanup()
    for line in damage_warnings(store):
        notify(line)
    if index is not None:
        counts = ", ".join(f"{sum(s.status == v for s in summaries)} {v}" for v in VERDICTS)
        notify(SiteWritten(index, len(summaries), counts))
    if request.markdown is not None and text is not None:
        return _summary_file(request.markdown, text, request.check)
    return None


def _summary_file(path: Path, text: str, check: bool) -> Summary:
    if check:
        current = path.read_text() if path.is_file() else None
        if current != text:
            raise Stopped(
                f"{plain(path)} is stale: regenerate it with `envbuild report --markdown {plain(path)}` "
                "(same --db) and commit it",
                1,
            )
        return Summary(path, "up to date")
    try:
        path.write_text(text)
    except OSError as exc:
        raise BadRequest(f"cannot write {path}: {exc.strerror}") from exc
    return Summary(path, "wrote")


def _check_results(
    results_dir: Path, allowed_signers: Path, revoked: Path | None, site: Path | None, notify: Callable[[object], None]
) -> None:
    """Every result.json and build-record.json under `results_dir` carries an attestation that verifies; else say which
    and stop with exit code 1 (2 when one cannot be read). A build record whose context the recipes no longer render
    is only warned about: it was evidence about an earlier context of its cell, and the report leaves it out."""
    failed = unreadable = 0
    outcomes = [(path, check_result(path, allowed_signers, revoked)) for path in result_files((results_dir,))]
    outcomes += [
        (path, verify_build.check(path, allowed_signers, revoked, require_signature=True, site=site))
        for path in import_builds.files_in((results_dir,))
    ]
    for result_json, outcome in outcomes:
        if isinstance(outcome, verify_build.CellNotRecomputed):
            notify(f"warning: {plain(result_json)}: [{outcome.check}] {plain(outcome)}")
        elif isinstance(outcome, attest.VerificationFailure):
            failed += 1
            notify(f"{plain(result_json)}: [{outcome.check}] {plain(outcome)}")
        elif isinstance(outcome, attest.AttestationInputError):
            unreadable += 1
            notify(f"{plain(result_json)}: {plain(outcome)}")
    if failed or unreadable:
        raise Stopped(
            f"{failed + unreadable} committed result(s) under {plain(results_dir)} without an attestation that "
            "verifies: sign them (`envbuild matrix sign`, results/README.md) or remove them",
            2 if unreadable else 1,
        )


def with_results(
    db: Path | None,
    results_dir: Path,
    allowed_signers: Path,
    revoked: Path | None,
    scratch: Path,
    site: Path | None,
    warn: Callable[[str], None],
) -> MatrixStore:
    """A matrix in `scratch` holding the local matrix (`db`, or the default one when it exists) and every result
    under `results_dir` whose attestation verifies (or that has none: unsigned), each with its provenance; returned
    open (close it). Results that do not verify, cannot be read or clash with a local run of the same id are left
    out, each with a warning."""
    local = db_path(db)
    merged = scratch / "with-results.db"
    if local.exists() or db is not None:  # a --db that does not exist is still an error (exit 2)
        source = open_store(local, must_exist=True)
        try:
            store = source.scratch_copy(merged)
        finally:
            source.close()
    else:
        store = MatrixStore.connect(merged)
    try:
        files = (results_dir,) if results_dir.is_dir() else ()
        results, _, problems = collect_files(files, merged) if files else ([], [], [])
        results, unverified, unreadable = with_provenances(results, allowed_signers, revoked)
        for problem in problems + unverified + unreadable:
            warn(f"left out of the report: {problem}")
        for file, result, provenance in results:
            try:
                store.record_run(result, source=str(file), provenance=provenance)
            except (RunConflictError, StoreError) as exc:
                warn(f"left out of the report: {plain(file)}: {plain(exc)}")
        builds, unverified, unreadable = import_builds.check_all(
            import_builds.files_in(files), allowed_signers, revoked, site
        )
        for problem in unverified + unreadable:
            warn(f"left out of the report: {problem}")
        for build in builds:
            try:
                import_builds.record(store, build)
            except StoreError as exc:
                warn(f"left out of the report: {plain(build.path)}: {plain(exc)}")
    except BaseException:
        store.close()
        raise
    return store
