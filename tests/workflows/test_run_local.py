"""`envbuild run workload --local`: the real workload as a subprocess of this interpreter."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from click.testing import CliRunner

from builder.cli import main
from builder.store.store import MatrixStore

ENVBUILD = [sys.executable, "-c", "from builder.cli import main; main()"]
SHORT = ["--", "--max-steps", "8", "--min-accuracy", "0", "--no-probes"]  # the pipeline, not the learning


def test_local_run_collects_and_records(tmp_path):
    out, db = tmp_path / "out", tmp_path / "m[bold].db"  # a path is printed as it is, never read as markup
    result = CliRunner().invoke(main, ["run", "workload", "--local", "--out", str(out), "--db", str(db), *SHORT])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "result.json").read_text())
    assert record["status"] == "pass" and record["command"] == "train"
    assert record["metrics"]["steps"] == 8
    assert record["host"]["checks"] and "image" not in record
    before, after = (record["metrics"][k]["accuracy"] for k in ("eval_before", "eval_after"))
    assert f"eval accuracy {before:.3f} -> {after:.3f}" in result.output
    assert f"next: envbuild report -o site --db {db}" in result.output
    assert f"recorded in {db}" in result.output
    with MatrixStore.open(db) as store:
        assert [r["result"]["run_id"] for r in store.runs()] == [record["run_id"]]


def test_local_bad_input(tmp_path):
    runner = CliRunner()
    db = ["--db", str(tmp_path / "m.db")]
    missing = runner.invoke(
        main, ["run", "workload", "--local", "--model", "./no/such/model", "--out", str(tmp_path / "a"), *db]
    )
    assert missing.exit_code == 2 and "no such file or directory" in missing.output
    gpus = runner.invoke(main, ["run", "workload", "--local", "--gpus", "0", "--out", str(tmp_path / "b"), *db])
    assert gpus.exit_code == 2 and "--gpus needs --image" in gpus.output
    assert not (tmp_path / "a").exists()
    assert not (tmp_path / "m.db.in-flight").exists()  # a refused run leaves no in-flight marker behind


def test_local_ctrl_c_is_never_pass(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [*ENVBUILD, "run", "workload", "--local", "--out", str(out), "--no-record"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline, seen = time.monotonic() + 120, ""
    while time.monotonic() < deadline and "step" not in seen:
        seen += proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, seen + output
    record = json.loads((out / "result.json").read_text())
    assert record["status"] == "error" and record["error_class"] == "interrupted"
