"""Damaged bytes inside stored text: every read goes on with a warning, `check` names the row; and what
files a read leaves beside the matrix file (docs/matrix.md "How the store behaves")."""

from __future__ import annotations

import sqlite3

import pytest
from click.testing import CliRunner

from builder.plan.cells import Cell
from builder.cli import main
from builder.store.store import MatrixStore
from matrix_fixtures import cpu_result, failed_result

ROCM_KEY = "rocm6.2-torch2.4-gfx90a-py3.10"


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def db(tmp_path):
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        store.record_run(failed_result(finished_at="2026-12-01T10:00:00Z"))
        store.record_run(cpu_result())
        store.record_build(
            Cell(flavor="cpu", torch="2.13", python="3.11"),
            status="fail",
            failure_class="compile_error",
            error="cc1: error",
            created_at="2026-12-01T09:00:00Z",
        )
    return db


# invalid UTF-8 (0xff) written into TEXT columns behind the store, as a byte flip on disk would
@pytest.mark.parametrize(
    "table, column",
    [
        ("runs", "error"),
        ("runs", "error_class"),
        ("builds", "error"),
        ("probes", "message"),
        ("runs", "finished_at"),
        ("builds", "image_tag"),
    ],
)
def test_invalid_utf8_in_stored_text_is_a_warning_everywhere(db, tmp_path, table, column):
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(f"UPDATE {table} SET {column} = CAST(x'6c6f7373ff2062616e67' AS TEXT)")
    conn.close()
    warned = []
    for args in (
        ("matrix", "list"),
        ("matrix", "list", "--json"),
        ("matrix", "show", ROCM_KEY),
        ("matrix", "export", "--json"),
        ("report", "-o", tmp_path / "site", "--no-recipes"),
    ):
        result = _run(*args, "--db", db)
        assert result.exit_code == 0, (args, result.output, result.exception)
        warned += [args[1]] if "were not UTF-8" in result.stderr else []
    if table != "probes":  # probe rows are read by `check` only (pages take probes from the result)
        assert {"export", "-o"} <= set(warned), warned  # (show reads only its own cell)
    assert (tmp_path / "site" / "index.html").is_file()
    check = _run("matrix", "check", "--db", db)
    assert check.exit_code == 1
    assert f"{table} row 1" in check.stdout and f"{column} unreadable (not UTF-8" in check.stdout, check.stdout


def test_a_read_leaves_an_empty_wal_and_a_shm_file_that_the_next_write_removes(db, tmp_path):
    """SQLite reads a WAL-mode file only with its -shm (32 KiB index) and -wal beside it: a read creates
    them (the -wal empty) when they are missing; the last writer to close removes both."""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.db"]
    assert _run("matrix", "list", "--db", db).exit_code == 0
    assert (tmp_path / "m.db-wal").stat().st_size == 0 and (tmp_path / "m.db-shm").is_file()
    with MatrixStore.open(db) as store:
        store.record_run(cpu_result())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.db"]


@pytest.mark.parametrize("content", [b"garbage" * 100, b""])
def test_a_refused_file_gets_no_wal_or_shm(tmp_path, content):
    bad = tmp_path / "bad.db"
    bad.write_bytes(content)
    assert _run("matrix", "list", "--db", bad).exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.db"]
