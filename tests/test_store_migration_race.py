"""Four `envbuild matrix import` processes started together on a new matrix file: every run lands, each exits 0."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3

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
