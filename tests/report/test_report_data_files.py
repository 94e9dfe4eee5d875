"""The per-cell data files, written by a worker thread: each file holds the cell's runs, the worker's error reaches
the caller, a block left with an error leaves nothing writing into the site, and rows the worker skipped are noted."""

from __future__ import annotations

import json
import sqlite3
import threading

import pytest

from builder.plan.cells import Cell
from builder.report.data_files import DataFiles
from builder.store.store import MatrixStore
from matrix_fixtures import make_result


def _matrix(tmp_path, cells: int, runs: int = 2):
    db = tmp_path / "m.db"
    keys = []
    with MatrixStore.open(db) as store:
        for n in range(cells):
            cell = Cell(flavor="rocm", accel_version=f"6.{n}", torch="2.4", arch="gfx90a", python="3.10")
            for _ in range(runs):
                store.record_run(make_result(image={"tag": "t", "manifest": {"cell": cell.model_dump()}}))
            keys.append(cell.key)
    return db, keys


def _site(tmp_path):
    root = tmp_path / "site"
    (root / "data").mkdir(parents=True)
    return root


def test_each_cell_gets_its_record_and_every_run(tmp_path):
    db, keys = _matrix(tmp_path, cells=3, runs=2)
    root = _site(tmp_path)
    with MatrixStore.open(db, readonly=True) as store:
        with DataFiles(store, root, None) as files:
            for key in keys:
                files.add(key, key, {"key": key})
        expected = {key: sorted(json.loads(t)["run_id"] for t in store.runs_json(key)) for key in keys}
    for key in keys:
        data = json.loads((root / "data" / f"{key}.json").read_text())
        assert data["key"] == key and data["more_runs"] == []
        assert sorted(run["run_id"] for run in data["runs"]) == expected[key]


def test_the_workers_error_is_raised_in_the_caller(tmp_path):
    db, keys = _matrix(tmp_path, cells=1)
    root = tmp_path / "site"  # no data/ folder: the worker cannot write the file
    root.mkdir()
    with MatrixStore.open(db, readonly=True) as store, pytest.raises(FileNotFoundError):
        with DataFiles(store, root, None) as files:
            files.add(keys[0], keys[0], {"key": keys[0]})


def test_a_block_left_with_an_error_leaves_no_worker_writing(tmp_path):
    db, keys = _matrix(tmp_path, cells=60, runs=3)
    root = _site(tmp_path)
    with MatrixStore.open(db, readonly=True) as store, pytest.raises(KeyboardInterrupt):
        with DataFiles(store, root, None) as files:
            for key in keys:
                files.add(key, key, {"key": key})
            raise KeyboardInterrupt
    assert not [t for t in threading.enumerate() if t.name == "report-data-files"]
    written = sorted(p.name for p in (root / "data").iterdir())
    assert len(written) < len(keys)  # stopped after the cell it was writing, not after every queued one
    threading.Event().wait(0.3)
    assert sorted(p.name for p in (root / "data").iterdir()) == written


def test_rows_the_worker_skipped_are_noted_in_the_store(tmp_path):
    db, keys = _matrix(tmp_path, cells=1, runs=2)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE runs SET result_json = '{\"broken' WHERE id = 1")
    conn.close()
    root = _site(tmp_path)
    with MatrixStore.open(db, readonly=True) as store:
        with DataFiles(store, root, None) as files:
            files.add(keys[0], keys[0], {"key": keys[0]})
        assert [(d.table, d.row_id, d.column) for d in store.damaged] == [("runs", 1, "result_json")]
    assert len(json.loads((root / "data" / f"{keys[0]}.json").read_text())["runs"]) == 1
