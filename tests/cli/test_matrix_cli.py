"""`envbuild matrix` and the verdict model: import is idempotent, statuses follow the documented rules."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.store.store import MatrixStore
from builder.store.summary import summarize
from builder.plan.cells import Cell
from matrix_fixtures import cpu_result, failed_result, make_result, with_probe_failure

ROCM_KEY = "rocm6.2-torch2.4-gfx90a-py3.10"
CPU_KEY = "cpu-torch2.13-py3.11"


def _write(path, result):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    return path


def _invoke(*args, db, terminal_width: int | None = None):
    env = {"COLUMNS": str(terminal_width)} if terminal_width else None
    return CliRunner(env=env).invoke(main, [*args, "--db", str(db)], catch_exceptions=False)


def test_import_of_artifact_directories_is_idempotent(tmp_path):
    artifacts = tmp_path / "artifacts"
    _write(artifacts / "cell-a" / "result.json", make_result())
    _write(artifacts / "cell-b" / "out" / "result.json", cpu_result())
    db = tmp_path / "m.db"
    first = _invoke("matrix", "import", str(artifacts), db=db)
    assert first.exit_code == 0, first.output
    assert "imported 2 new run(s), 0 already recorded" in first.output
    again = _invoke("matrix", "import", str(artifacts), str(artifacts / "cell-a" / "result.json"), db=db)
    assert again.exit_code == 0 and "imported 0 new run(s), 3 already recorded" in again.output
    with MatrixStore.open(db) as store:
        assert len(store.runs()) == 2


def test_ci_job_databases_merge_builds_and_runs_once(tmp_path):
    """A CI cell job records into its own database; the report job imports those with the result files."""
    cell = Cell(flavor="rocm", accel_version="6.2", torch="2.5", arch="gfx942", python="3.10")
    job_a, job_b = tmp_path / "artifacts" / "result-a", tmp_path / "artifacts" / "result-b"
    with MatrixStore.open(job_a / "matrix.db") as store:
        store.record_build(cell, status="fail", failure_class="compile", error="hipcc: fatal error")
    run = make_result(image={"tag": "envbuild/x:1", "digest": "sha256:aa"})
    with MatrixStore.open(job_b / "matrix.db") as store:
        build_id = store.record_build(Cell.from_result(run), status="pass", image_digest="sha256:aa")
        store.record_run(run, build_id=build_id)
    _write(job_b / "out" / "result.json", run)
    db = tmp_path / "m.db"
    first = _invoke("matrix", "import", str(tmp_path / "artifacts"), db=db)
    assert first.exit_code == 0, first.output
    assert "imported 1 new run(s), 1 already recorded, 0 replaced, 2 new build(s)" in first.output
    again = _invoke("matrix", "import", str(tmp_path / "artifacts"), db=db)
    assert (
        "imported 0 new run(s), 2 already recorded, 0 replaced, 0 new build(s)" in again.output
    )  # the .db copy counts too
    with MatrixStore.open(db) as store:
        summaries = {s.key: s for s in summarize(store)}
        (merged_run,) = store.runs()
        assert store.builds(ROCM_KEY)[0]["id"] == merged_run["build_id"]
    assert summaries[cell.key].status == "fail" and summaries[cell.key].failure_class == "build:compile"
    assert summaries[ROCM_KEY].status == "pass"


def test_an_invalid_file_imports_nothing_unless_skipped(tmp_path):
    good = _write(tmp_path / "good" / "result.json", make_result())
    bad = tmp_path / "bad" / "result.json"
    bad.parent.mkdir()
    bad.write_text('{"schema_version": 1, "status": "pa')  # truncated write
    db = tmp_path / "m.db"
    refused = _invoke("matrix", "import", str(good), str(bad), db=db)
    assert refused.exit_code == 2
    assert "bad/result.json" in refused.output and "--skip-invalid" in refused.output
    with MatrixStore.open(db) as store:
        assert store.runs() == []
    skipped = _invoke("matrix", "import", "--skip-invalid", str(good), str(bad), db=db)
    assert skipped.exit_code == 0
    assert "imported 1 new run(s), 0 already recorded, 0 replaced, 0 new build(s), 1 skipped" in skipped.output


def test_list_show_and_export_report_the_verdicts(tmp_path):
    db = tmp_path / "m.db"
    _write(tmp_path / "a" / "result.json", make_result())
    _write(tmp_path / "b" / "result.json", with_probe_failure(cpu_result()))
    assert _invoke("matrix", "import", str(tmp_path / "a"), str(tmp_path / "b"), db=db).exit_code == 0
    listed = json.loads(_invoke("matrix", "list", "--json", db=db).output)
    assert {c["key"]: c["status"] for c in listed} == {ROCM_KEY: "pass", CPU_KEY: "partial"}
    shown = json.loads(_invoke("matrix", "show", CPU_KEY, "--json", db=db).output)
    assert shown["note"] == "probe warnings: sdpa_vs_math" and shown["runs"][0]["probes"][1]["status"] == "fail"
    text = _invoke("matrix", "show", ROCM_KEY, db=db)
    assert text.exit_code == 0 and "device_discovery" in text.output
    out = tmp_path / "export.json"
    assert _invoke("matrix", "export", "--json", "-o", str(out), db=db).exit_code == 0
    exported = json.loads(out.read_text())
    assert exported["format"] == "envbuild-matrix" and len(exported["cells"]) == 2


def test_unknown_cell_is_a_usage_error(tmp_path):
    with MatrixStore.open(tmp_path / "m.db") as store:
        store.record_run(cpu_result())
    result = _invoke("matrix", "show", "rocm9.9-torch0.1-py3.0", db=tmp_path / "m.db")
    assert result.exit_code == 2 and "no cell 'rocm9.9-torch0.1-py3.0'" in result.output
    assert f"known: {CPU_KEY}" in result.output


def test_corrupt_database_is_a_clear_error(tmp_path):
    db = tmp_path / "m.db"
    db.write_bytes(b"not a database at all" * 100)
    result = _invoke("matrix", "list", db=db)
    assert result.exit_code == 2 and "not an SQLite database" in result.output


@pytest.mark.parametrize(
    "results, status, failure_class",
    [
        ([make_result()], "pass", None),
        ([with_probe_failure(make_result())], "partial", None),
        ([make_result(), failed_result("oom", "HIP out of memory")], "fail", "oom"),
        ([failed_result(), make_result()], "pass", None),
    ],
)
def test_cell_status_is_the_latest_verdict(tmp_path, results, status, failure_class):
    with MatrixStore.open(tmp_path / "m.db") as store:
        for i, result in enumerate(results):
            result["finished_at"] = f"2026-12-0{2 + i}T13:00:00Z"  # recorded in time order
            store.record_run(result)
        (summary,) = summarize(store)
    assert (summary.status, summary.failure_class) == (status, failure_class)


def test_history_has_last_pass_and_flips_and_build_failures(tmp_path):
    cell = Cell(flavor="rocm", accel_version="6.2", torch="2.4", arch="gfx90a", python="3.10")
    with MatrixStore.open(tmp_path / "m.db") as store:
        store.record_run(make_result(finished_at="2026-12-01T10:00:00Z"))
        store.record_run(failed_result("nan_loss", "loss NaN at step 3", finished_at="2026-12-01T11:00:00Z"))
        store.record_run(make_result(finished_at="2026-12-01T12:00:00Z"))
        store.record_build(
            cell,
            status="fail",
            failure_class="compile",
            error="hipcc: fatal error\nmore",
            created_at="2026-12-01T13:00:00Z",
        )
        recipe_only = Cell(flavor="rocm", accel_version="6.1.2", torch="2.3", arch="gfx90a", python="3.10")
        summaries = {s.key: s for s in summarize(store, [recipe_only])}
    s = summaries[ROCM_KEY]
    assert s.status == "fail" and s.failure_class == "build:compile" and s.note == "hipcc: fatal error"
    assert s.last_pass_at == "2026-12-01T12:00:00Z"
    assert [(a.verdict, b.verdict) for a, b in s.flips] == [("pass", "fail"), ("fail", "pass"), ("pass", "fail")]
    assert summaries[recipe_only.key].status == "untested" and summaries[recipe_only.key].in_recipes


@pytest.mark.parametrize("args", [("matrix", "list"), ("matrix", "export", "--json"), ("report", "-o", "site")])
def test_reading_commands_do_not_create_a_missing_database(tmp_path, args, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "missing.db"
    result = _invoke(*args, db=db)
    assert result.exit_code == 2 and "no matrix database at" in result.output
    assert not db.exists()


def _on_base(base: str, status: str = "pass", finished_at: str = "2026-12-02T10:00:00Z") -> dict:
    manifest = {
        "cell": {"flavor": "rocm", "accel_version": "6.2", "torch": "2.4", "arch": "gfx90a", "python": "3.10"},
        "base_image": base,
        "context_hash": base.encode().hex().ljust(64, "0"),
    }
    image = {"tag": f"envbuild/x:{base[-1]}", "digest": f"sha256:{base[-1] * 64}", "manifest": manifest}
    if status == "pass":
        return make_result(image=image, finished_at=finished_at)
    return failed_result("nan_loss", "loss NaN", image=image, finished_at=finished_at)


def test_two_bases_are_two_environments_not_a_flip(tmp_path):
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        store.record_run(_on_base("rocm/dev-ubuntu-22.04:6.2", "pass", "2026-12-02T10:00:00Z"))
        store.record_run(_on_base("my/custom-base:1", "fail", "2026-12-02T11:00:00Z"))
    (line,) = json.loads(_invoke("matrix", "list", "--json", db=db).output)
    assert (line["status"], line["failure_class"], line["flaky"]) == ("fail", "nan_loss", False)
    assert [(e["status"], e["flips"], e["environment"].split(" ")[0]) for e in line["environments"]] == [
        ("pass", 0, "rocm/dev-ubuntu-22.04:6.2"),
        ("fail", 0, "my/custom-base:1"),
    ]
    table = _invoke("matrix", "list", db=db, terminal_width=250).output
    rows = [r for r in table.splitlines() if ROCM_KEY in r]
    assert len(rows) == 2 and "rocm/dev-ubuntu-22.04:6.2" in rows[1] and "pass" in rows[1]
    assert _report_flaky(tmp_path / "site1", db) is False
    with MatrixStore.open(db) as store:
        store.record_run(_on_base("my/custom-base:1", "pass", "2026-12-02T12:00:00Z"))
    (line,) = json.loads(_invoke("matrix", "list", "--json", db=db).output)
    assert (line["status"], line["flaky"]) == ("pass", True)  # the same environment went fail -> pass
    assert _report_flaky(tmp_path / "site2", db) is True
    shown = json.loads(_invoke("matrix", "show", ROCM_KEY, "--json", db=db).output)
    assert [(f["from"], f["to"], f["environment"].split(" ")[0]) for f in shown["flips"]] == [
        ("fail", "pass", "my/custom-base:1")
    ]


def _report_flaky(site, db) -> bool:
    """The report's flaky marker for the rocm cell: data.json and the index row agree."""
    assert (
        CliRunner().invoke(main, ["report", "-o", str(site), "--db", str(db), "--no-recipes", "--no-results"]).exit_code
        == 0
    )
    (cell,) = json.loads((site / "data.json").read_text())["cells"]
    marked = '<span class="flaky"' in (site / "index.html").read_text().split("<table", 1)[1]
    assert cell["flaky"] == marked
    return cell["flaky"]


@pytest.mark.parametrize(
    "content, says, never",
    [
        (
            {"cell_key": CPU_KEY, "context_hash": "ab" * 32},
            "is not an envbuild result: it has no schema_version",
            "upgrade",
        ),
        ({**cpu_result(), "schema_version": "1"}, "not one any envbuild wrote", "upgrade"),
        ({**cpu_result(), "schema_version": 0}, "not one any envbuild wrote", "upgrade"),
        ({**cpu_result(), "schema_version": 99}, "newer than this envbuild reads (up to 1): upgrade envbuild", None),
    ],
    ids=["a manifest", "a version as text", "version 0", "a newer result"],
)
def test_importing_json_that_is_not_a_result_says_so(tmp_path, content, says, never):
    """Only a result a newer envbuild wrote is told to upgrade; any other JSON file is told it is no result."""
    path = _write(tmp_path / "some.json", content)
    outcome = _invoke("matrix", "import", str(path), db=tmp_path / "m.db")
    assert outcome.exit_code == 2, outcome.output
    assert says in outcome.output, outcome.output
    assert never is None or never not in outcome.output.lower()
    assert not (tmp_path / "m.db").exists() or MatrixStore.open(tmp_path / "m.db").runs() == []
