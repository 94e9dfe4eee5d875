"""The report's whole-matrix reads, made ahead in a thread: the same values as made in line, the rows they skip
noted in the caller's store, and their error raised in the caller."""

from __future__ import annotations

import sqlite3

import pytest

from builder.report.matrix_reads import ReadsAhead, read
from builder.store.store import MatrixStore, StoreError
from matrix_fixtures import cpu_result, make_result


def _matrix(tmp_path):
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        for result in (make_result(), make_result(), cpu_result(), make_result(config={"preset": "speed"})):
            store.record_run(result)
    return db


def test_the_reads_made_ahead_are_those_made_in_line(tmp_path):
    db = _matrix(tmp_path)
    with MatrixStore.open(db, readonly=True) as store:
        ahead = ReadsAhead(store).result()
        assert ahead == read(store)
    assert ahead.train_metrics and ahead.per_preset


def test_rows_the_thread_skipped_are_noted_in_the_callers_store(tmp_path):
    db = _matrix(tmp_path)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE runs SET result_json = '{\"broken' WHERE id = 4")
    conn.close()
    with MatrixStore.open(db, readonly=True) as store:
        ReadsAhead(store).result()
        assert {(d.table, d.row_id, d.column) for d in store.damaged} == {("runs", 4, "result_json")}


def test_the_threads_error_is_raised_in_the_caller(tmp_path):
    db = _matrix(tmp_path)
    with MatrixStore.open(db, readonly=True) as store:
        store.path = tmp_path / "gone.db"  # the file the thread opens is not there
        with pytest.raises(StoreError, match="gone.db"):
            ReadsAhead(store).result()
