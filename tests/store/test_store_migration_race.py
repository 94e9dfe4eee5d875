"""A matrix file being created by one process while others open it: concurrent first imports all land, and a
reader sees the creator's first commit whole."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3

import pytest
from click.testing import CliRunner

from matrix_fixtures import make_result

IMPORTERS = 4
TRIALS = 20
RUNS_EACH = 10


def _import(barrier, db: str, folder: str, queue) -> None:
    from builder.cli import main

    barrier.wait()
    result = CliRunner().invoke(main, ["matrix", "import", folder, "--db", db])
    queue.put((result.exit_code, result.output[-400:]))


def test_concurrent_first_imports_lose_no_run(tmp_path):
    folders = []
    for importer in range(IMPORTERS):
        for n in range(RUNS_EACH):
            path = tmp_path / f"in{importer}" / f"r{n}" / "result.json"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(make_result()))
        folders.append(str(tmp_path / f"in{importer}"))
    ctx = multiprocessing.get_context("fork")
    failures = []
    for trial in range(TRIALS):
        db = str(tmp_path / f"trial{trial}.db")
        barrier, queue = ctx.Barrier(IMPORTERS), ctx.Queue()
        procs = [ctx.Process(target=_import, args=(barrier, db, folder, queue)) for folder in folders]
        for proc in procs:
            proc.start()
        outcomes = [queue.get(timeout=120) for _ in procs]
        for proc in procs:
            proc.join(timeout=120)
        failures += [(trial, code, out) for code, out in outcomes if code != 0]
        conn = sqlite3.connect(db)
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == IMPORTERS * RUNS_EACH or failures, trial
        conn.close()
    assert not failures, failures[:3]


def test_a_reader_sees_a_creators_first_commit_whole(tmp_path, monkeypatch):
    """The race behind a rare "SQLite file but not a matrix database" from concurrent first imports, made
    deterministic: the creator commits the first migration between two statements of a reader checking the
    file. The reader must see the file before that commit (no tables, "being created") or after it, never
    version 0 from before with the tables from after."""
    from builder.store import store_schema
    from builder.store.store import MatrixStore

    db = tmp_path / "new.db"
    creator = sqlite3.connect(db, isolation_level=None)
    creator.execute("PRAGMA journal_mode = WAL")  # as a creating import leaves it before it migrates
    real_connect, fired = sqlite3.connect, []

    def reader_connect(*args, **kwargs):
        conn = real_connect(*args, **kwargs)

        def commit_meanwhile(sql: str) -> None:
            if "sqlite_master" in sql and not fired:
                fired.append(sql)
                store_schema._migrate(creator, db)

        conn.set_trace_callback(commit_meanwhile)
        return conn

    monkeypatch.setattr(store_schema.sqlite3, "connect", reader_connect)
    assert MatrixStore.peek(db) is None  # seen before the commit
    assert fired
    monkeypatch.setattr(store_schema.sqlite3, "connect", real_connect)
    store = MatrixStore.peek(db)  # and after it: a current, empty matrix
    assert store is not None and store.schema_version == store_schema.SCHEMA_VERSION
    store.close()
    creator.close()


def test_a_run_started_while_an_import_creates_the_file_records_into_it(tmp_path):
    """`envbuild run`'s check before its work meets the file another process has just created (SQLite header
    and WAL switch written, first migration not yet committed): the check passes, and opening the file for
    the record afterwards makes it a matrix. A file with someone else's tables is still refused."""
    from builder.store.store import MatrixStore, StoreError

    db = tmp_path / "new.db"
    creating = sqlite3.connect(db)
    creating.execute("PRAGMA journal_mode = WAL")
    assert db.stat().st_size > 0
    assert MatrixStore.preflight(db) == db
    with MatrixStore.open(db) as store:
        store.record_run(make_result())
    assert sqlite3.connect(db).execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    creating.close()

    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE notes (text)").connection.commit()
    with pytest.raises(StoreError, match="SQLite file but not a matrix database"):
        MatrixStore.preflight(other)
