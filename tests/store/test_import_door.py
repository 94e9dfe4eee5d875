"""The import door: cell identity, the typed schema at every door, a report that publishes only its own files."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.plan.cells import Cell
from builder.cli import main
from builder.store.store import InvalidResultError, MatrixStore
from matrix_fixtures import cpu_result, make_result
from site_files import compare_scripts, strict_json

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "results" / "cuda13.0-torch2.11-sm_90-py3.12" / "local-smoke-tiny-gemma" / "result.json"
H200_KEY = "cuda13.0-torch2.11-sm_90-py3.12"


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _write(path: Path, result: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    return path


def _impostor() -> dict:
    """The glued key: flavor `cuda1` + version `3.0` glued into the H200 cell's key, a CPU run that failed."""
    cell = {"flavor": "cuda1", "accel_version": "3.0", "torch": "2.11", "arch": "sm_90", "python": "3.12"}
    return cpu_result(
        status="fail", error_class="nan_loss", error="loss became NaN", image={"manifest": {"cell": cell}}
    )


# ---- cell identity ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "coords",
    [
        {"flavor": "cuda1", "accel_version": "3.0"},  # cuda1 + 3.0 == cuda + 13.0 when glued
        {"flavor": "rocm6", "accel_version": "2"},
    ],
)
def test_a_flavor_that_could_swallow_a_version_digit_is_refused(coords):
    with pytest.raises(ValueError, match="cell flavor"):
        Cell(**{"torch": "2.11", "python": "3.12", **coords})


def test_a_cell_key_parses_back_to_its_coordinates():
    for cell in (
        Cell(flavor="cuda", accel_version="13.0", torch="2.11", arch="sm_90", python="3.12"),
        Cell(flavor="cpu", torch="2.13", python="3.11"),
        Cell(flavor="rocm", accel_version="6.1.2", torch="2.3", arch="gfx90a:xnack-", python="3.10"),
        Cell(flavor="rocm", accel_version="6.2", torch="2.4", python="3.10"),
    ):
        assert Cell.from_key(cell.key) == cell
    for bad in ("cuda13.0-torch2.11", "cuda-torch2.11-py3.12-x", "../x-torch2-py3", "rocm6.2-torch2.4--py3.10"):
        with pytest.raises(ValueError):
            Cell.from_key(bad)


@pytest.mark.parametrize("impostor_first", [False, True])
def test_the_cuda1_impostor_never_takes_over_the_h200_cell(tmp_path, impostor_first):
    db = tmp_path / "m.db"
    bad = _write(tmp_path / "bad" / "result.json", _impostor())
    order = [bad, H200] if impostor_first else [H200, bad]
    outcomes = [_invoke("matrix", "import", path, "--db", db) for path in order]
    refused = outcomes[0] if impostor_first else outcomes[1]
    assert refused.exit_code == 2 and "cell flavor 'cuda1' is not valid" in refused.output
    listed = json.loads(_invoke("matrix", "list", "--json", "--db", db).output)
    assert [(c["key"], c["status"]) for c in listed] == [(H200_KEY, "pass")]
    shown = json.loads(_invoke("matrix", "show", H200_KEY, "--json", "--db", db).output)
    assert shown["cell"] == {
        "flavor": "cuda",
        "accel_version": "13.0",
        "torch": "2.11",
        "arch": "sm_90",
        "python": "3.12",
    }
    assert [r["hardware"]["gpu_name"] for r in shown["runs"]] == ["NVIDIA H200"]


def test_a_stored_cell_whose_key_names_other_coordinates_is_never_joined(tmp_path):
    """A file written by an older envbuild holds the glued key with cuda1/3.0: the H200 run is refused, not filed there."""
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        store.record_run(make_result())
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "INSERT INTO cells (key, flavor, accel_version, torch, arch, python)"
            " VALUES (?, 'cuda1', '3.0', '2.11', 'sm_90', '3.12')",
            (H200_KEY,),
        )
    conn.close()
    with MatrixStore.open(db) as store, pytest.raises(InvalidResultError, match="names other coordinates"):
        store.record_run(json.loads(H200.read_text()))
    result = _invoke("matrix", "import", H200, "--db", db)
    assert result.exit_code == 2 and "names other coordinates" in result.output
    with MatrixStore.open(db, readonly=True) as store:
        assert [c.key for c in store.cells()] == ["rocm6.2-torch2.4-gfx90a-py3.10"]
        assert any(d.table == "cells" for d in store.damaged)


def test_two_cells_with_the_same_coordinates_cannot_be_stored(tmp_path):
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        store.record_run(make_result())
    conn = sqlite3.connect(db)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO cells (key, flavor, accel_version, torch, arch, python)"
            " VALUES ('other', 'rocm', '6.2', '2.4', 'gfx90a', '3.10')"
        )
    conn.close()


def test_a_run_linked_to_a_build_of_another_cell_is_refused(tmp_path):
    with MatrixStore.open(tmp_path / "m.db") as store:
        build = store.record_build(Cell(flavor="cpu", torch="2.13", python="3.11"), status="pass")
        with pytest.raises(InvalidResultError, match="build .* is of cell cpu-torch2.13-py3.11"):
            store.record_run(make_result(), build_id=build)
        assert store.runs() == []


# ---- the schema at every door ----------------------------------------------------------------
def _hostile_db(tmp_path: Path, mutate) -> Path:
    """A CI-style matrix file with one run whose stored result.json was changed by `mutate` behind the store."""
    other = tmp_path / "ci" / "matrix.db"
    result = make_result()
    with MatrixStore.open(other) as store:
        store.record_run(result)
    mutate(result)
    conn = sqlite3.connect(other)
    with conn:
        conn.execute("UPDATE runs SET result_json = ?", (json.dumps(result),))
    conn.close()
    return other


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r["metrics"].update(samples_per_s=float("nan")), "metrics.samples_per_s: number must be finite"),
        (lambda r: r.update(finished_at="9999-12-31T23:59:59Z"), "finished_at: .*must lie between"),
        (lambda r: r.update(config="x"), "config: Input should be a valid dictionary"),
        (lambda r: r.update(error="x" * 2**20), "error: string longer than 4096"),
    ],
)
def test_every_row_of_an_imported_db_is_validated(tmp_path, mutate, message):
    other = _hostile_db(tmp_path, mutate)
    db = tmp_path / "m.db"
    result = _invoke("matrix", "import", other, "--db", db)
    assert result.exit_code == 2, result.output
    import re

    assert re.search(message, result.output), result.output
    assert not db.exists()


@pytest.mark.parametrize(
    "column, value, message",
    [
        ("duration_s", "many", "duration_s: Input should be a valid number"),
        ("error", "x" * 2**20, "error: string longer than 4096 characters"),
        ("created_at", "9999-12-31T23:59:59Z", "created_at: .*must lie between"),
        ("duration_s", float("inf"), "duration_s: number must be finite"),
    ],
)
def test_a_build_row_of_an_imported_db_is_validated(tmp_path, column, value, message):
    other = tmp_path / "ci" / "matrix.db"
    with MatrixStore.open(other) as store:
        store.record_build(Cell(flavor="cpu", torch="2.13", python="3.11"), status="pass", duration_s=1.0)
    conn = sqlite3.connect(other)
    with conn:
        conn.execute(f"UPDATE builds SET {column} = ?", (value,))
    conn.close()
    result = _invoke("matrix", "import", other, "--db", tmp_path / "m.db")
    import re

    assert result.exit_code == 2 and re.search(message, result.output), result.output
    assert not (tmp_path / "m.db").exists()


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("run_id", 12345, "run_id: Input should be a valid string"),
        ("finished_at", 17, "finished_at: Input should be a valid string"),
    ],
)
def test_publish_validates_through_the_schema(tmp_path, field, value, message):
    src = _write(tmp_path / "run" / "result.json", make_result(**{field: value}))
    result = _invoke("matrix", "publish", src, "--name", "x", "-o", tmp_path / "results")
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "results").exists()


def test_text_is_stored_without_control_or_bidi_characters(tmp_path):
    db = tmp_path / "m.db"
    src = _write(
        tmp_path / "r" / "result.json",
        make_result(status="fail", error_class="nan_loss", error="loss \u202eNaN\x00\x1b[2J at step 3"),
    )
    assert _invoke("matrix", "import", src, "--db", db).exit_code == 0
    with MatrixStore.open(db, readonly=True) as store:
        assert store.runs()[0]["result"]["error"] == "loss NaN[2J at step 3"
    again = _invoke("matrix", "import", src, "--db", db)  # the same file again is the same run
    assert "0 new run(s), 1 already recorded" in again.output


# ---- publishing is a whitelist -----------------------------------------------------------------
def _report(db: Path, out: Path):
    return CliRunner().invoke(main, ["report", "-o", str(out), "--db", str(db), "--no-recipes"])


def _site_text(site: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in site.rglob("*") if p.is_file())


def test_a_build_log_path_named_by_an_imported_db_is_never_opened(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-BUILD-LOG\n")
    other = tmp_path / "ci" / "matrix.db"
    cell = Cell(flavor="rocm", accel_version="6.2", torch="2.4", arch="gfx90a", python="3.10")
    with MatrixStore.open(other) as store:
        store.record_build(cell, status="pass", log_path="/etc/passwd", build_uid="a" * 32)
        store.record_build(cell, status="fail", failure_class="compile_error", log_path=str(secret), build_uid="b" * 32)
        store.record_run(make_result(), source=str(secret.with_name("result.json")))
    db = tmp_path / "m.db"
    assert _invoke("matrix", "import", other, "--db", db).exit_code == 0
    site = tmp_path / "site"
    result = _report(db, site)
    assert result.exit_code == 0, result.output
    text = _site_text(site)
    assert "root:x:0:0" not in text and "TOP-SECRET" not in text
    assert list((site / "logs").iterdir()) == []


def test_a_symlinked_container_log_is_not_followed(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-RUN-LOG\n")
    db = tmp_path / "m.db"
    attempt = tmp_path / "envbuild-attempts" / "20261202T130041Z-run-abc"
    attempt.mkdir(parents=True)
    os.symlink(secret, attempt / "container.log")
    linked = tmp_path / "envbuild-attempts" / "20261202T130042Z-run-def"
    os.symlink(tmp_path / "elsewhere", linked)  # the attempt folder itself a link
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "container.log").write_text("TOP-SECRET-LINKED-DIR\n")
    real = tmp_path / "envbuild-attempts" / "20261202T130043Z-run-123"
    real.mkdir()
    (real / "container.log").write_text("step 1 loss 1.95\n")
    with MatrixStore.open(db) as store:
        store.record_run(
            make_result(finished_at="2026-12-02T13:00:41Z"),
            attempt_dir=str(attempt.relative_to(tmp_path)),
            source=str(secret.with_name("result.json")),
        )
        store.record_run(make_result(finished_at="2026-12-02T13:00:42Z"), attempt_dir=str(linked.relative_to(tmp_path)))
        store.record_run(make_result(finished_at="2026-12-02T13:00:43Z"), attempt_dir=str(real.relative_to(tmp_path)))
    site = tmp_path / "site"
    result = _report(db, site)
    assert result.exit_code == 0, result.output
    text = _site_text(site)
    assert "TOP-SECRET" not in text
    logs = list((site / "logs").iterdir())
    assert len(logs) == 1 and logs[0].read_text() == "step 1 loss 1.95\n"


def test_a_nan_row_stored_by_an_older_envbuild_is_skipped_everywhere_and_named_by_check(tmp_path):
    """`samples_per_s: NaN` wrote bare NaN into compare.html (the page showed 0 rows), the run was
    silently missing from its data file, and `check` called every row readable."""
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        store.record_run(cpu_result())
        store.record_run(make_result(finished_at="2026-12-01T10:00:00Z"))
    bad = make_result(finished_at="2026-12-02T10:00:00Z")
    bad["metrics"]["samples_per_s"] = float("nan")
    conn = sqlite3.connect(db)
    with conn:  # as an older envbuild stored it: json.dumps writes NaN
        conn.execute(
            "INSERT INTO runs (run_id, cell_id, command, status, result_json, finished_at, recorded_at)"
            " SELECT ?, cell_id, 'train', 'pass', ?, ?, ? FROM runs WHERE id = 2",
            (bad["run_id"], json.dumps(bad), bad["finished_at"], bad["finished_at"]),
        )
    conn.close()
    site = tmp_path / "site"
    result = _report(db, site)
    assert result.exit_code == 0, result.output
    assert f"({bad['run_id']}): result_json unreadable" in result.stderr

    profiles = compare_scripts(site)  # strict JSON: a NaN fails here
    assert bad["run_id"] not in [p["run_id"] for p in profiles["rocm6.2-torch2.4-gfx90a-py3.10"]]
    for data in (site / "data").glob("*.json"):
        strict_json(data.read_text())
    shown = _invoke("matrix", "show", "rocm6.2-torch2.4-gfx90a-py3.10", "--json", "--db", db)
    assert shown.exit_code == 0 and bad["run_id"] not in [r["run_id"] for r in json.loads(shown.stdout)["runs"]]
    check = CliRunner().invoke(main, ["matrix", "check", "--db", str(db)])
    assert check.exit_code == 1 and f"runs row 3 ({bad['run_id']}): result_json unreadable" in check.stdout


@pytest.mark.parametrize("out", ["/proc/envbuild-x", "afile/x"])
def test_publish_to_an_unwritable_folder_exits_2_and_writes_nothing(tmp_path, monkeypatch, out):
    """`matrix publish -o /proc/x` was a FileNotFoundError traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("a file, not a folder\n")
    src = _write(tmp_path / "run" / "result.json", make_result())
    result = CliRunner().invoke(main, ["matrix", "publish", str(src), "--name", "x", "-o", out])
    assert result.exit_code == 2 and "cannot" in result.output, result.output
    assert isinstance(result.exception, SystemExit)  # a clean exit, not a traceback
    assert (tmp_path / "afile").read_text() == "a file, not a folder\n"
