"""Crafted matrix files at the import door: a .db is read through fixed queries of our own
schema, after its shape (tables, columns, indexes; no views, triggers, virtual or generated columns) matched the
one envbuild's migrations give. Real SQLite files made by MatrixStore, then altered with sqlite3; the CLI runs
in a subprocess with a timeout, so a hang fails the test instead of stopping the suite."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from builder.interrupt import Terminated, stop_signals
from builder.store.store import MatrixStore
from builder.store.store_schema import ReadBudget
from matrix_fixtures import make_result

ENVBUILD = [sys.executable, "-c", "from builder.cli import main; main()"]
ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
CRAFTS = {
    "a view with an endless query": [
        "DROP TABLE probes",
        "DROP TABLE runs",
        f"CREATE VIEW runs AS SELECT ({ENDLESS}) AS id",
    ],
    "a column named like SQL": [f'ALTER TABLE builds ADD COLUMN "id, ({ENDLESS}) AS pwn"'],
    "a missing column": ["ALTER TABLE runs DROP COLUMN mfu"],
    "a column named a b": ['ALTER TABLE runs ADD COLUMN "a b" TEXT'],
    "no probes table": ["DROP TABLE probes"],
    "a trigger": ["CREATE TRIGGER t AFTER INSERT ON cells BEGIN SELECT 1; END"],
    "a generated column": ["ALTER TABLE cells ADD COLUMN g INTEGER GENERATED ALWAYS AS (length(key)) VIRTUAL"],
    "another table": ["CREATE TABLE extra (x)"],
}


def crafted(tmp_path: Path, statements: list[str]) -> Path:
    db = tmp_path / "ci-job.db"
    with MatrixStore.open(db) as store:
        store.record_run(make_result())
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = DELETE")
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return db


def envbuild(*args, timeout: int = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run([*ENVBUILD, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("craft", CRAFTS)
def test_a_crafted_db_is_refused_at_import_and_skipped_under_skip_invalid(tmp_path, craft):
    source = crafted(tmp_path, CRAFTS[craft])
    before = source.read_bytes()
    target = tmp_path / "m.db"
    refused = envbuild("matrix", "import", "--db", target, source)
    assert refused.returncode == 2, refused.stderr
    assert "not a matrix file of schema" in refused.stderr and "Traceback" not in refused.stderr
    assert not target.exists() and source.read_bytes() == before
    good = tmp_path / "good" / "result.json"
    good.parent.mkdir()
    good.write_text(__import__("json").dumps(make_result()))
    skipped = envbuild("matrix", "import", "--db", target, source, good, "--skip-invalid")
    assert skipped.returncode == 0, skipped.stderr
    assert f"skipped {source}" in skipped.stderr and "Traceback" not in skipped.stderr
    assert "imported 1 new run(s)" in skipped.stdout


@pytest.mark.parametrize("command", [["matrix", "list"], ["matrix", "check"], ["report", "--no-recipes", "-o", "site"]])
@pytest.mark.parametrize("craft", ["a view with an endless query", "a column named like SQL"])
def test_list_check_and_report_refuse_a_crafted_db_instead_of_hanging(tmp_path, command, craft):
    db = crafted(tmp_path, CRAFTS[craft])
    out = envbuild(*[tmp_path / c if c == "site" else c for c in command], "--db", db)
    assert out.returncode == 2 and "not a matrix file of schema" in out.stderr, out.stderr


def test_a_symlinked_or_fifo_db_is_refused(tmp_path):
    real = crafted(tmp_path, [])
    link = tmp_path / "link.db"
    link.symlink_to(real)
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    for path, words in ((link, "a symbolic link"), (fifo, "not a regular file")):
        out = envbuild("matrix", "import", "--db", tmp_path / "m.db", path, timeout=30)
        assert out.returncode == 2 and words in out.stderr, out.stderr


def test_an_untouched_db_still_merges(tmp_path):
    source = crafted(tmp_path, [])
    out = envbuild("matrix", "import", "--db", tmp_path / "m.db", source)
    assert out.returncode == 0 and "imported 1 new run(s)" in out.stdout, out.stderr


def test_the_read_budget_stops_a_long_query_and_its_time_out_is_no_signal():
    conn = sqlite3.connect(":memory:")
    budget = ReadBudget(0.3)
    conn.set_progress_handler(budget, 10_000)
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        conn.execute(ENDLESS).fetchall()
    assert time.monotonic() - started < 5 and "longer than 0.3 s" in budget.stopped
    budget.reraise()  # a time-out is not a signal: nothing to raise


@pytest.mark.parametrize("sig, stop", [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)])
def test_a_signal_that_stops_a_read_is_raised_again_once_the_query_stopped(sig, stop):
    """Under the handlers every envbuild command runs with, Ctrl-C / SIGTERM during a bounded read ends the query
    and then stops the command as anywhere else (SIGTERM as Terminated)."""
    conn = sqlite3.connect(":memory:")
    with stop_signals(), ReadBudget(60) as budget:
        conn.set_progress_handler(budget, 10_000)
        threading.Timer(0.3, os.kill, (os.getpid(), sig)).start()
        with pytest.raises(sqlite3.OperationalError):
            conn.execute(ENDLESS).fetchall()
        with pytest.raises(stop) as raised:
            budget.reraise()
    assert isinstance(raised.value, Terminated) == (sig == signal.SIGTERM)
