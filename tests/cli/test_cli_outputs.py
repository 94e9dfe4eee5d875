"""Every command checks its output path before any work, and a missing input is one clear line: no tracebacks."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.store.store import MatrixStore

# command -> (arguments with OUT for the output path, whether OUT is a file)
ENVBUILD_OUTPUTS = {
    "render": (["render", "--flavor", "cpu", "--torch", "2.13", "-o", "OUT"], False),
    "image --dry-run": (["image", "--flavor", "cpu", "--torch", "2.13", "--dry-run", "-o", "OUT"], False),
    "report": (["report", "-o", "OUT", "--db", "DB"], False),
    "matrix export": (["matrix", "export", "--json", "-o", "OUT", "--db", "DB"], True),
    "ci render": (["ci", "render", "-o", "OUT"], False),
    "run workload": (["run", "workload", "--local", "--out", "OUT", "--no-record"], False),
}
WORKLOAD_OUTPUTS = {"train": ["train", "--out", "OUT"], "probe": ["probe", "--out", "OUT"]}
ENVBUILD_MISSING = {
    "image --context": (["image", "--context", "MISSING"], "Directory 'MISSING' does not exist"),
    "report --db": (["report", "-o", "OUT", "--db", "MISSING"], "no matrix database at MISSING"),
    "matrix export --db": (["matrix", "export", "--json", "--db", "MISSING"], "no matrix database at MISSING"),
    "matrix import": (["matrix", "import", "MISSING"], "'MISSING' does not exist"),
    "run workload --data": (
        ["run", "workload", "--local", "--data", "MISSING", "--out", "OUT"],
        "--data MISSING: no such file or directory",
    ),
}
WORKLOAD_MISSING = {
    "train --data": (["train", "--data", "MISSING", "--out", "OUT"], "MISSING: no such file"),
    "predict --adapter": (["predict", "--adapter", "MISSING", "hi"], "--adapter MISSING: no such directory"),
}


def _unwritable(kind: str, read_only) -> str:
    return "/proc/x" if kind == "proc" else str(read_only / "out")


def _fill(args, **paths):
    return [paths.get(a, a) for a in args]


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "m.db"
    MatrixStore.connect(path).close()
    return str(path)


@pytest.mark.parametrize("kind", ["proc", "read-only"])
@pytest.mark.parametrize("command", sorted(ENVBUILD_OUTPUTS))
def test_envbuild_unwritable_output_is_exit_2_before_any_work(tmp_path, read_only_dir, db, command, kind):
    args, is_file = ENVBUILD_OUTPUTS[command]
    out = _unwritable(kind, read_only_dir) + ("/export.json" if is_file else "")
    result = CliRunner().invoke(main, _fill(args, OUT=out, DB=db))
    assert result.exit_code == 2, result.output
    assert "cannot write" in result.output or "not writable" in result.output, result.output
    assert "running locally" not in result.output and "wrote" not in result.output


@pytest.mark.parametrize("kind", ["proc", "read-only"])
@pytest.mark.parametrize("command", sorted(WORKLOAD_OUTPUTS))
def test_workload_unwritable_output_is_exit_2_before_any_work(tmp_path, read_only_dir, command, kind):
    out = _unwritable(kind, read_only_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "workload", *_fill(WORKLOAD_OUTPUTS[command], OUT=out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"bad input: --out {out}: cannot write there" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("command", sorted(ENVBUILD_MISSING))
def test_envbuild_missing_input_is_one_clear_line(tmp_path, command):
    args, message = ENVBUILD_MISSING[command]
    missing = str(tmp_path / "missing")
    result = CliRunner().invoke(main, _fill(args, MISSING=missing, OUT=str(tmp_path / "out")))
    assert result.exit_code == 2, result.output
    assert message.replace("MISSING", missing) in result.output
    assert isinstance(result.exception, SystemExit)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", sorted(WORKLOAD_MISSING))
def test_workload_missing_input_is_one_clear_line(tmp_path, command):
    args, message = WORKLOAD_MISSING[command]
    missing = str(tmp_path / "missing")
    proc = subprocess.run(
        [sys.executable, "-m", "workload", *_fill(args, MISSING=missing, OUT=str(tmp_path / "out"))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert message.replace("MISSING", missing) in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_dry_run_writes_nothing_without_o(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["image", "--flavor", "cpu", "--torch", "2.13", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "image tag:  envbuild/" in result.output and "not written" in result.output
    assert "build log" not in result.output and "Dockerfile:" not in result.output
    assert list(tmp_path.iterdir()) == []
