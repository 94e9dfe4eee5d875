"""The SQLite matrix store: schema, idempotent recording, concurrency, and refusing bad files untouched."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from builder.store.store import SCHEMA_VERSION, InvalidResultError, MatrixStore, StoreError, default_db_path
from builder.plan.cells import Cell
from matrix_fixtures import cpu_result, failed_result, make_result

CELL = Cell(flavor="rocm", accel_version="6.2", torch="2.4", arch="gfx90a", python="3.10")


def test_new_database_gets_current_schema_wal_and_tables(tmp_path):
    db = tmp_path / "sub" / "m.db"
    with MatrixStore.open(db) as store:
        assert store.schema_version == SCHEMA_VERSION
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"cells", "builds", "runs", "probes"} <= tables


def test_the_cli_reads_the_database_variable_and_the_store_does_not(monkeypatch, tmp_path):
    """$ENVBUILD_DB is read where the CLI parses --db: `matrix import` fills the file it names; the store's own
    default stays ./envbuild-matrix.db whatever the environment says."""
    from click.testing import CliRunner

    from builder.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENVBUILD_DB", str(tmp_path / "x.db"))
    assert str(default_db_path()) == "envbuild-matrix.db"
    (tmp_path / "r.json").write_text(json.dumps(cpu_result()))
    result = CliRunner().invoke(main, ["matrix", "import", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "x.db").is_file() and not (tmp_path / "envbuild-matrix.db").exists()


def test_run_is_recorded_once_per_run_id_with_its_probes(tmp_path):
    result = make_result()
    with MatrixStore.open(tmp_path / "m.db") as store:
        first = store.record_run(result, source="a/result.json")
        second = store.record_run(result, source="b/result.json")
        assert first.inserted and not second.inserted
        assert first.row_id == second.row_id and first.cell_key == "rocm6.2-torch2.4-gfx90a-py3.10"
        runs = store.runs()
        assert len(runs) == 1 and runs[0]["result"] == result and runs[0]["source"] == "a/result.json"
        assert [p["name"] for p in store.probe_rows(first.row_id)] == ["device_discovery", "sdpa_vs_math"]


def test_run_links_to_the_build_with_its_image_digest(tmp_path):
    with MatrixStore.open(tmp_path / "m.db") as store:
        build_id = store.record_build(
            CELL,
            status="pass",
            image_tag="envbuild/x:1",
            image_digest="sha256:aa",
            recipe_hash="r1",
            context_hash="c1",
            duration_s=12.5,
            log_path="b.log",
            manifest={"cell": CELL.model_dump()},
        )
        run = store.record_run(make_result(image={"tag": "envbuild/x:1", "digest": "sha256:aa"}))
        assert store.runs()[0]["build_id"] == build_id
        build = store.builds(CELL.key)[0]
        assert build["manifest"] == {"cell": CELL.model_dump()} and build["duration_s"] == 12.5
        assert run.cell_key == CELL.key


def test_failed_build_needs_a_failure_class(tmp_path):
    with MatrixStore.open(tmp_path / "m.db") as store:
        with pytest.raises(StoreError, match="failure_class"):
            store.record_build(CELL, status="fail")
        store.record_build(CELL, status="fail", failure_class="compile", error="hipcc: error")
        assert store.builds()[0]["failure_class"] == "compile"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r.update(schema_version=2), "schema_version 2"),
        (lambda r: r.pop("run_id"), "run_id"),
        (lambda r: r.update(status="ok"), "status must be one of"),
        (lambda r: r.update(status="fail"), "error_class"),
        (lambda r: r["versions"].pop("torch"), "versions.torch"),
    ],
)
def test_invalid_results_are_refused_and_nothing_is_written(tmp_path, mutate, message):
    result = make_result()
    mutate(result)
    with MatrixStore.open(tmp_path / "m.db") as store:
        with pytest.raises(InvalidResultError, match=message):
            store.record_run(result)
        assert store.runs() == [] and store.cells() == []


def _record_many(db: str, worker: int, count: int) -> None:
    with MatrixStore.open(db) as store:
        for i in range(count):
            result = cpu_result() if i % 2 else failed_result()
            result["run_id"] = f"w{worker}-{i}"
            store.record_run(result)


def test_two_processes_recording_at_once_lose_nothing(tmp_path):
    db = str(tmp_path / "m.db")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_record_many, args=(db, w, 40)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    with MatrixStore.open(db) as store:
        ids = {r["result"]["run_id"] for r in store.runs()}
        assert ids == {f"w{w}-{i}" for w in range(2) for i in range(40)}
        assert {c.key for c in store.cells()} == {"cpu-torch2.13-py3.11", "rocm6.2-torch2.4-gfx90a-py3.10"}
        assert store.integrity_ok()


def test_garbage_file_is_refused_and_left_byte_for_byte(tmp_path):
    db = tmp_path / "m.db"
    garbage = bytes(range(256)) * 64
    db.write_bytes(garbage)
    with pytest.raises(StoreError, match="not an SQLite database.*nothing was changed"):
        MatrixStore.connect(db)
    assert db.read_bytes() == garbage


def test_damaged_pages_are_refused_and_left_byte_for_byte(tmp_path):
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        for _ in range(30):
            store.record_run(make_result())
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    data = bytearray(db.read_bytes())
    page = 4096
    assert len(data) > 4 * page
    data[2 * page : 4 * page] = b"\xa5" * (2 * page)  # overwrite two table pages, keep the header valid
    db.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="corrupt|integrity check"):
        MatrixStore.connect(db)
    assert db.read_bytes() == bytes(data)


def test_newer_schema_is_refused_and_left_byte_for_byte(tmp_path):
    db = tmp_path / "m.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE future (x)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}, newer"):
        MatrixStore.connect(db)
    assert db.read_bytes() == before


def test_reopening_an_existing_database_keeps_its_rows(tmp_path):
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        store.record_run(make_result())
    with MatrixStore.open(db) as store:
        assert len(store.runs()) == 1 and store.schema_version == SCHEMA_VERSION


def test_an_older_schema_is_migrated_in_place_keeping_its_rows(tmp_path, monkeypatch):
    from builder.store import store_schema as store_module  # the migrations live there

    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        store.record_run(make_result())
    v2 = "ALTER TABLE runs ADD COLUMN reviewed INTEGER NOT NULL DEFAULT 0; CREATE INDEX runs_reviewed ON runs(reviewed)"
    monkeypatch.setattr(store_module, "MIGRATIONS", (*store_module.MIGRATIONS, v2))
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with MatrixStore.open(db) as store:
        assert store.schema_version == SCHEMA_VERSION + 1 and len(store.runs()) == 1
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT reviewed FROM runs").fetchall() == [(0,)]


def _store_of_commit(commit: str, tmp_path):
    """builder/store.py as it was at `commit` (a real older envbuild's writer), imported from a file; its
    imports of modules that live in subpackages now point at their places in this tree."""
    import importlib.util

    shown = subprocess.run(
        ["git", "-C", str(Path(__file__).parent), "show", f"{commit}:builder/store.py"], capture_output=True, text=True
    )
    if shown.returncode != 0:
        pytest.skip(f"no git history with {commit} here: {shown.stderr.strip()}")
    source = shown.stdout.replace("from builder.cells import", "from builder.plan.cells import").replace(
        "from builder import verdict_rules", "from builder.store import verdict_rules"
    )
    path = tmp_path / f"store_{commit}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_database_of_schema_1_is_upgraded_and_its_attempts_stop_being_verdicts(tmp_path):
    from builder.store.summary import summarize
    from builder.plan.cells import Cell

    old = _store_of_commit("3865b08", tmp_path)  # the last schema-1 envbuild
    db = tmp_path / "m.db"
    cell = Cell(flavor="rocm", accel_version="6.2", torch="2.4", arch="gfx90a", python="3.10")
    manifest = {"cell": cell.model_dump(), "base_image": "rocm/dev-ubuntu-22.04:6.2", "context_hash": "c" * 64}
    with old.MatrixStore.open(db) as store:
        assert store.schema_version == 1
        build = store.record_build(
            cell,
            status="pass",
            image_digest="sha256:aa",
            manifest=manifest,
            context_hash="c" * 64,
            created_at="2026-12-01T09:00:00Z",
        )
        store.record_run(
            make_result(
                finished_at="2026-12-01T10:00:00Z", image={"tag": "t", "digest": "sha256:aa", "manifest": manifest}
            ),
            build_id=build,
        )
        store.record_run(
            make_result(status="error", error_class="interrupted", error="Ctrl-C", finished_at="2026-12-01T11:00:00Z")
        )
        store.record_build(
            cell, status="fail", failure_class="base_image_unavailable", error="typo", created_at="2026-12-01T12:00:00Z"
        )
        store.record_build(
            cell,
            status="fail",
            failure_class="compile_error",
            error="hipcc",
            manifest=manifest,
            context_hash="c" * 64,
            created_at="2026-12-01T08:00:00Z",
        )
    with MatrixStore.open(db) as store:
        assert store.schema_version == SCHEMA_VERSION == 5
        (summary,) = summarize(store)
        assert len(store.runs()) == 2 and len(store.builds()) == 3
        assert {(r["provenance"], r["signer"]) for r in store.runs()} == {("unsigned", None)}
    assert summary.status == "pass" and summary.failure_class is None
    assert [(e.verdict, e.failure_class) for e in summary.events] == [
        ("fail", "build:compile_error"),
        ("pass", None),
        ("attempt", "interrupted"),
        ("attempt", "build:base_image_unavailable"),
    ]
    assert summary.environment == "rocm/dev-ubuntu-22.04:6.2 ctx cccccccccccc"
    assert [(a.verdict, b.verdict) for a, b in summary.flips] == [("fail", "pass")] and summary.flaky
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_merged_rows_get_copies_of_their_attempt_directories(tmp_path):
    """Merging a CI job's file copies its attempts' own files under this file's attempt root (re-rooted);
    a symlink among them, or an attempt path outside the job's own root, is not followed."""
    from builder.plan.cells import Cell

    job = tmp_path / "artifacts" / "result-a"
    cell = Cell(flavor="cpu", accel_version=None, torch="2.13", arch=None, python="3.11")
    b1, r1 = "envbuild-attempts/20261202T215704Z-build-b1", "envbuild-attempts/20261202T220110Z-run-r1"
    (job / b1).mkdir(parents=True)
    (job / b1 / "build.log").write_text("#1 [internal] load build definition\n")
    (job / r1).mkdir(parents=True)
    (job / "secret").write_text("not for publishing\n")
    (job / r1 / "container.log").symlink_to(job / "secret")
    (job / r1 / "attempt.json").write_text("{}\n")
    with MatrixStore.open(job / "matrix.db") as store:
        store.record_build(cell, status="fail", failure_class="interrupted", attempt_dir=b1)
        store.record_run(cpu_result(), attempt_dir=r1)
        store.record_run(cpu_result(), attempt_dir=str(tmp_path / "elsewhere"))
    with MatrixStore.open(tmp_path / "m.db") as store:
        store.merge_from(job / "matrix.db")
        (build,), runs = store.builds(), store.runs()
    assert build["attempt_dir"] == b1 and build["counts"] == 0
    assert (tmp_path / b1 / "build.log").read_text().startswith("#1 [internal]")
    assert sorted(r["attempt_dir"] or "" for r in runs) == ["", r1]
    assert sorted(p.name for p in (tmp_path / r1).iterdir()) == ["attempt.json"]  # the link was not copied
