"""The matrix against bad data: invalid cell keys, damaged rows, empty or garbage files, conflicting runs."""

from __future__ import annotations

import json
import sqlite3

from click.testing import CliRunner

from builder.cli import main
from builder.store.store import InvalidResultError, MatrixStore, RunConflictError
from matrix_fixtures import cpu_result, make_result

import pytest

ROCM_KEY = "rocm6.2-torch2.4-gfx90a-py3.10"


def _invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _write(path, result):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    return path


def _damage(db, marker: bytes, replacement: bytes):
    """Overwrite bytes inside stored JSON in the file itself (same length): integrity_check still passes."""
    data = db.read_bytes()
    assert data.count(marker) == 1 and len(marker) == len(replacement)
    db.write_bytes(data.replace(marker, replacement))
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.parametrize(
    "cell_field, value", [("arch", "../../x"), ("flavor", "/abs/path"), ("arch", "a/b"), ("python", "3.10/../..")]
)
def test_a_result_with_an_unsafe_cell_is_refused_at_import(tmp_path, cell_field, value):
    cell = {
        "flavor": "rocm",
        "accel_version": "6.2",
        "torch": "2.4",
        "arch": "gfx90a",
        "python": "3.10",
        cell_field: value,
    }
    bad = _write(tmp_path / "r" / "result.json", make_result(image={"manifest": {"cell": cell}}))
    db = tmp_path / "m.db"
    result = _invoke("matrix", "import", str(bad), "--db", str(db))
    assert result.exit_code == 2, result.output
    assert f"cell {cell_field} {value!r} is not valid" in result.output
    assert not db.exists()
    with MatrixStore.open(db) as store, pytest.raises(InvalidResultError, match="not valid"):
        store.record_run(make_result(image={"manifest": {"cell": cell}}))


def test_a_damaged_row_is_skipped_with_a_warning_and_listed_by_check(tmp_path):
    db = tmp_path / "m.db"
    broken, fine = make_result(error="MARKER-ONE"), cpu_result()
    with MatrixStore.open(db) as store:
        store.record_run(broken)
        store.record_run(fine)
    _damage(db, b'"MARKER-ONE"', b'\xff\xfe{"MARKER-O')  # invalid UTF-8 and broken JSON inside result_json
    listed = CliRunner().invoke(main, ["matrix", "list", "--json", "--db", str(db)])
    assert listed.exit_code == 0, listed.output  # list reads the verdict columns, not the damaged JSON
    assert {c["key"]: c["status"] for c in json.loads(listed.stdout)} == {
        "cpu-torch2.13-py3.11": "pass",
        ROCM_KEY: "pass",
    }
    shown = CliRunner().invoke(main, ["matrix", "show", ROCM_KEY, "--db", str(db)])
    assert shown.exit_code == 0
    assert f"warning: skipped runs row 1 ({broken['run_id']}): result_json unreadable" in shown.stderr
    report = CliRunner().invoke(
        main, ["report", "-o", str(tmp_path / "site"), "--db", str(db), "--no-recipes", "--no-results"]
    )
    assert report.exit_code == 0, report.output
    assert broken["run_id"] in report.stderr and (tmp_path / "site" / "index.html").is_file()
    check = CliRunner().invoke(main, ["matrix", "check", "--db", str(db)])
    assert check.exit_code == 1
    assert check.stdout.startswith(f"runs row 1 ({broken['run_id']}): result_json unreadable")
    assert "1 damaged row(s)" in check.stderr
    with MatrixStore.open(tmp_path / "clean.db") as store:
        store.record_run(fine)
    clean = _invoke("matrix", "check", "--db", str(tmp_path / "clean.db"))
    assert clean.exit_code == 0 and "every row readable" in clean.output


@pytest.mark.parametrize(
    "args",
    [
        ("matrix", "list"),
        ("matrix", "show", ROCM_KEY),
        ("matrix", "export", "--json"),
        ("matrix", "check"),
        ("report", "-o", "site"),
    ],
)
def test_reads_on_an_empty_file_exit_2_and_leave_it_empty(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "empty.db"
    db.touch()
    result = _invoke(*args, "--db", str(db))
    assert result.exit_code == 2 and "is empty (0 bytes), not a matrix database" in result.output
    assert db.stat().st_size == 0


def test_reads_never_grow_the_file(tmp_path):
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        store.record_run(make_result())
    before = db.read_bytes()
    for args in (("matrix", "list"), ("matrix", "show", ROCM_KEY), ("matrix", "check")):
        assert _invoke(*args, "--db", str(db)).exit_code == 0
    assert db.read_bytes() == before


@pytest.mark.parametrize("content", [b"garbage" * 100, b""])
def test_importing_a_garbage_db_creates_no_matrix(tmp_path, monkeypatch, content):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ENVBUILD_DB", raising=False)
    (tmp_path / "garbage.db").write_bytes(content)
    result = _invoke("matrix", "import", "garbage.db")
    assert result.exit_code == 2 and "garbage.db" in result.output
    assert not (tmp_path / "envbuild-matrix.db").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("matrix", "list"),
        ("matrix", "import", "r.json"),
        ("report", "-o", "site"),
        ("run", "workload", "--local", "--out", "run"),
        ("image", "--flavor", "cpu", "--torch", "2.13", "-o", "ctx"),
    ],
)
def test_a_corrupt_database_is_exit_2_everywhere(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "r.json", cpu_result())
    db = tmp_path / "bad.db"
    db.write_bytes(b"SQLite format 3\x00" + b"\x07" * 8000)
    monkeypatch.setenv("ENVBUILD_DB", str(db))
    result = _invoke(*args)
    assert result.exit_code == 2, result.output
    assert "bad.db" in result.output and ("Restore it from a backup" in result.output or "corrupt" in result.output)
    assert not (tmp_path / "run" / "result.json").exists()  # `run` checks the matrix before training


def test_same_run_id_with_other_content_is_refused_unless_replace(tmp_path):
    db = tmp_path / "m.db"
    first = make_result()
    _write(tmp_path / "a" / "result.json", first)
    assert _invoke("matrix", "import", str(tmp_path / "a"), "--db", str(db)).exit_code == 0
    changed = dict(first, status="fail", error_class="oom", error="HIP out of memory")
    _write(tmp_path / "b" / "result.json", changed)
    refused = _invoke("matrix", "import", str(tmp_path / "b"), "--db", str(db))
    assert refused.exit_code == 2
    assert f"run {first['run_id']} ({tmp_path / 'b' / 'result.json'}): recorded with other content" in refused.output
    assert "--replace" in refused.output
    with MatrixStore.open(db) as store:
        assert store.runs()[0]["result"]["status"] == "pass"
        with pytest.raises(RunConflictError, match="--replace"):
            store.record_run(changed)
        assert store.record_run(first).outcome == "identical"
    replaced = _invoke("matrix", "import", "--replace", str(tmp_path / "b"), str(tmp_path / "a"), "--db", str(db))
    assert replaced.exit_code == 2 and "the same run_id with different content in the import" in replaced.output
    replaced = _invoke("matrix", "import", "--replace", str(tmp_path / "b"), "--db", str(db))
    assert "imported 0 new run(s), 0 already recorded, 1 replaced" in replaced.output
    with MatrixStore.open(db) as store:
        (row,) = store.runs()
        assert row["result"]["status"] == "fail" and store.probe_rows(row["row_id"])


def test_importing_a_db_counts_every_run(tmp_path):
    other = tmp_path / "ci" / "matrix.db"
    with MatrixStore.open(other) as store:
        for result in (make_result(), cpu_result()):
            store.record_run(result)
    db = tmp_path / "m.db"
    assert (
        "imported 2 new run(s), 0 already recorded" in _invoke("matrix", "import", str(other), "--db", str(db)).output
    )
    assert (
        "imported 0 new run(s), 2 already recorded" in _invoke("matrix", "import", str(other), "--db", str(db)).output
    )


def test_an_unsafe_cell_recorded_by_an_older_envbuild_is_skipped_not_written_anywhere(tmp_path):
    """A key like `rocm6.2-torch2.4-../../x-py3.10` already in a file: reads skip it, the report stays inside -o."""
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        store.record_run(make_result())
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "INSERT INTO cells (key, flavor, accel_version, torch, arch, python) VALUES"
            " ('rocm6.2-torch2.4-../../x-py3.10', 'rocm', '6.2', '2.4', '../../x', '3.10')"
        )
        evil = dict(make_result(), run_id="e" * 32)
        conn.execute(
            "INSERT INTO runs (run_id, cell_id, command, status, result_json, recorded_at)"
            " VALUES (?, 2, 'train', 'pass', ?, '2026-12-02T13:00:00Z')",
            (evil["run_id"], json.dumps(evil)),
        )
    conn.close()
    (tmp_path / "work").mkdir()
    site = tmp_path / "work" / "site"
    result = CliRunner().invoke(main, ["report", "-o", str(site), "--db", str(db), "--no-recipes", "--no-results"])
    assert result.exit_code == 0, result.output
    assert "warning: skipped cells row 2 (rocm6.2-torch2.4-../../x-py3.10)" in result.stderr
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["site"]
    assert [p.name for p in (site / "cells").iterdir()] == [f"{ROCM_KEY}.html"]
    assert not (tmp_path / "x").exists()
    check = _invoke("matrix", "check", "--db", str(db))
    assert check.exit_code == 1 and "cells row 2" in check.output and "'../../x' is not valid" in check.output
