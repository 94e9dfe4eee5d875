"""The project's published results (results/: runs and build records) in every report: merged with the local matrix,
if there is one, in a scratch copy; the local file is never written."""

from __future__ import annotations

from pathlib import Path

from builder.cli import site_recipes
from builder.cli.matrix import _collect, _provenances
from builder.cli.store_options import open_store, plain
from builder.store.store import MatrixStore, RunConflictError, StoreError, default_db_path
from builder.workflows import import_builds


def with_results(
    db: Path | None, results_dir: Path, allowed_signers: Path, revoked: Path | None, scratch: Path, warn
) -> MatrixStore:
    """A matrix in `scratch` holding the local matrix (`db`, or the default one when it exists) and every result
    under `results_dir` whose attestation verifies (or that has none: unsigned), each with its provenance; returned
    open (close it). Results that do not verify, cannot be read or clash with a local run of the same id are left
    out, each with a warning."""
    local = Path(db or default_db_path())
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
        results, _, problems = _collect(files, merged) if files else ([], [], [])
        results, unverified, unreadable = _provenances(results, allowed_signers, revoked)
        for problem in problems + unverified + unreadable:
            warn(f"left out of the report: {problem}")
        for file, result, provenance in results:
            try:
                store.record_run(result, source=str(file), provenance=provenance)
            except (RunConflictError, StoreError) as exc:
                warn(f"left out of the report: {plain(file)}: {plain(exc)}")
        builds, unverified, unreadable = import_builds.check_all(
            import_builds.files_in(files), allowed_signers, revoked, site_recipes.folder()
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
