"""Workload commands say what they did: probe prints a table (or JSON), train without --out names its run dir,
predict's stdout is JSON lines only."""

from __future__ import annotations

import json
import subprocess
import sys

SHORT = ["--max-steps", "2", "--no-probes", "--min-accuracy", "0"]


def _workload(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "workload", *args], capture_output=True, text=True, cwd=cwd, timeout=600
    )


def test_probe_prints_a_table_and_json(tmp_path):
    table = _workload("probe", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["probe", "status", "key", "value", "limit", "message"]
    gemm = next(line for line in lines if line.startswith("gemm_accuracy"))
    assert "pass" in gemm and "_rel_error=" in gemm and "limit" in gemm
    assert lines[-1] == "pass"
    assert list(tmp_path.iterdir()) == []  # no --out: nothing written
    as_json = _workload("probe", "--json", "--out", str(tmp_path / "p"))
    record = json.loads(as_json.stdout)
    assert record["status"] == "pass" and {p["name"] for p in record["probes"]} >= {"gemm_accuracy"}
    assert json.loads((tmp_path / "p" / "result.json").read_text())["run_id"] == record["run_id"]


def test_train_without_out_writes_a_run_dir_and_says_where_then_predict_prints_json_only(tmp_path):
    train = _workload("train", *SHORT, cwd=tmp_path)
    assert train.returncode == 0, train.stderr[-2000:]
    (run_dir,) = (tmp_path / "workload-runs").iterdir()
    assert f"no --out given: writing to workload-runs/{run_dir.name}" in train.stderr
    assert (run_dir / "result.json").is_file() and (run_dir / "adapter").is_dir()
    predict = _workload("predict", "--adapter", str(run_dir / "adapter"), "I am so happy", "我很生气")
    assert predict.returncode == 0, predict.stderr
    rows = [json.loads(line) for line in predict.stdout.splitlines()]
    assert [r["text"] for r in rows] == ["I am so happy", "我很生气"]
    assert "Loading weights" not in predict.stderr and "Warning" not in predict.stderr
