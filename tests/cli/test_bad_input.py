"""Bad input is bad input: `python -m workload` and `envbuild run workload` exit 2 with a file:line message,
write no result and record nothing in the matrix."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from builder.cli import main

ROWS = [{"text": f"text {label} {i}", "label": label} for label in ("joy", "anger") for i in range(4)]


def _jsonl(rows) -> bytes:
    return ("\n".join(json.dumps(r) for r in rows) + "\n").encode()


# name -> (file name, bytes, extra workload args, what the message must hold)
DATA_CASES = {
    "empty": ("d.jsonl", b"", [], "d.jsonl: no examples in the file"),
    "blank-lines": ("d.jsonl", b"\n\n  \n", [], "d.jsonl: no examples in the file"),
    "malformed-json": ("d.jsonl", _jsonl(ROWS[:3]) + b'{"text": "x", "label"\n', [], "d.jsonl:4: not valid JSON"),
    "not-an-object": ("d.jsonl", b"[1, 2]\n", [], "d.jsonl:1: each line must be a JSON object"),
    "missing-label-column": ("d.jsonl", _jsonl([{"text": "a"}] * 4), [], "d.jsonl:1: missing column(s) ['label']"),
    "csv-missing-column": ("d.csv", b"sentence,label\nhello,joy\n", [], "d.csv:1: missing column(s) ['text']"),
    "single-class": (
        "d.jsonl",
        _jsonl([{"text": f"t{i}", "label": "joy"} for i in range(6)]),
        [],
        "d.jsonl:1: only one label ('joy')",
    ),
    "non-utf8": (
        "d.jsonl",
        _jsonl(ROWS[:2]) + b'{"text": "caf\xe9", "label": "joy"}\n',
        [],
        "d.jsonl:3: not valid UTF-8",
    ),
    "unknown-label": ("d.jsonl", _jsonl(ROWS), ["--labels", "joy,fear"], "d.jsonl:5: unknown label 'anger'"),
    "wrong-file-type": ("d.txt", b"hello\n", [], "d.txt: unknown file type '.txt'"),
}


def _workload(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "workload", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def _bad_input_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("[workload] bad input: ")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.parametrize("case", sorted(DATA_CASES))
def test_workload_train_refuses_bad_data_with_exit_2(tmp_path, case):
    name, content, extra, message = DATA_CASES[case]
    data = tmp_path / name
    data.write_bytes(content)
    out = tmp_path / "out"
    proc = _workload("train", "--data", str(data), "--out", str(out), *(extra or ["--labels", "auto"]))
    assert proc.returncode == 2, proc.stderr
    assert message in _bad_input_line(proc.stderr)
    assert not out.exists()  # nothing written, not even the out dir


@pytest.mark.parametrize(
    "args,message",
    [
        (["train", "--model", "MODEL_DIR"], "no config.json in it"),
        (["train", "--model", "./no/such/model"], "--model ./no/such/model: no such directory"),
        (
            ["train", "--model", "tiny-gema"],
            "--model tiny-gema: not a tiny model, a local directory or a hub id (owner/name); did you mean tiny-gemma?",
        ),
        (["train", "--data", "./no-such.jsonl"], "no-such.jsonl: no such file"),
        (["train", "--preset", "smok"], "invalid choice: 'smok'"),
        (["train", "--lr", "fast"], "argument --lr: invalid float value: 'fast'"),
        (["train", "--bogus"], "unrecognized arguments: --bogus"),
        (["train", "--out", "/proc/x"], "--out /proc/x: cannot write there"),
        (["probe", "--out", "/proc/x"], "--out /proc/x: cannot write there"),
        (["predict", "--adapter", "/nonexistent", "hi"], "--adapter /nonexistent: no such directory"),
        (["predict", "--adapter", "MODEL_DIR", "hi"], "not a workload adapter"),
    ],
    ids=[
        "model-dir-without-config",
        "missing-model-dir",
        "typo-tiny-model",
        "missing-data",
        "typo-preset",
        "bad-arg-value",
        "unknown-arg",
        "train-out-proc",
        "probe-out-proc",
        "predict-missing-adapter",
        "predict-not-an-adapter",
    ],
)
def test_workload_refuses_bad_paths_and_arguments_with_exit_2(tmp_path, args, message):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "weights.bin").write_bytes(b"x")
    args = [str(model_dir) if a == "MODEL_DIR" else a for a in args]
    proc = _workload(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert message in _bad_input_line(proc.stderr)
    assert proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no run dir, no result


@pytest.mark.parametrize("case", ["empty", "missing-label-column", "single-class", "non-utf8", "malformed-json"])
def test_envbuild_run_refuses_bad_data_with_exit_2_and_records_nothing(tmp_path, case):
    name, content, _, message = DATA_CASES[case]
    data = tmp_path / name
    data.write_bytes(content)
    out, db = tmp_path / "out", tmp_path / "m.db"
    result = CliRunner().invoke(
        main,
        [
            "run",
            "workload",
            "--local",
            "--data",
            str(data),
            "--out",
            str(out),
            "--db",
            str(db),
            "--",
            "--labels",
            "auto",
        ],
    )
    assert result.exit_code == 2, result.output
    assert message in result.output and "nothing recorded" in result.output
    assert not out.exists() and not db.exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--preset", "smok"], "invalid choice: 'smok'"),
        (["--", "--max-steps", "many"], "argument --max-steps: invalid int value: 'many'"),
        (["--model", "MODEL_DIR"], "no config.json in it"),
    ],
    ids=["typo-preset", "bad-workload-args", "model-dir-without-config"],
)
def test_envbuild_run_refuses_bad_arguments_with_exit_2(tmp_path, args, message):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    args = [str(model_dir) if a == "MODEL_DIR" else a for a in args]
    out, db = tmp_path / "out", tmp_path / "m.db"
    result = CliRunner().invoke(main, ["run", "workload", "--local", "--out", str(out), "--db", str(db), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not out.exists() and not db.exists()


@pytest.mark.parametrize(
    "db,message",
    [
        (
            "/proc/x/m.db",
            "cannot use the matrix database /proc/x/m.db (--db / $ENVBUILD_DB): No such file or directory",
        ),
        ("DIR", "Invalid value for '--db': File 'TMP' is a directory."),
        ("NOT_SQLITE", "TMP/not.db is not an SQLite database"),
        ("EMPTY", "TMP/empty.db is empty (0 bytes)"),
        ("READ_ONLY_DIR/m.db", "cannot use the matrix database READ_ONLY_DIR/m.db"),
    ],
)
def test_envbuild_run_checks_the_matrix_before_training(tmp_path, read_only_dir, db, message):
    (tmp_path / "not.db").write_text("not a database")
    (tmp_path / "empty.db").write_bytes(b"")
    db = {
        "DIR": str(tmp_path),
        "NOT_SQLITE": str(tmp_path / "not.db"),
        "EMPTY": str(tmp_path / "empty.db"),
        "READ_ONLY_DIR/m.db": str(read_only_dir / "m.db"),
    }.get(db, db)
    result = CliRunner().invoke(
        main, ["run", "workload", "--local", "--out", str(tmp_path / "out")], env={"ENVBUILD_DB": db}
    )
    assert result.exit_code == 2, result.output
    expected = message.replace("READ_ONLY_DIR", str(read_only_dir)).replace("TMP", str(tmp_path))
    assert expected in " ".join(result.output.split()), result.output
    assert "running locally" not in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", [["render", "-o", "OUT"], ["image", "-o", "OUT", "--dry-run"]])
@pytest.mark.parametrize("ref", ["NOT A REF", "Upper/Case:1", "x:tag with space", "a//b"])
def test_a_base_image_that_is_no_image_reference_is_refused(tmp_path, command, ref):
    """It would go into the Dockerfile's FROM line: refused before anything is rendered (exit 2)."""
    args = [str(tmp_path / "ctx") if a == "OUT" else a for a in command]
    result = CliRunner().invoke(main, [args[0], "--flavor", "cpu", "--torch", "2.13", "--base-image", ref, *args[1:]])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '--base-image': {ref!r} is not an image reference" in " ".join(result.output.split())
    assert not (tmp_path / "ctx").exists()


@pytest.mark.parametrize(
    ("flags", "shown"),
    [
        (["--tag", "Envbuild/Cpu:1"], "--tag: 'Envbuild/Cpu:1'"),
        (["--tag", "cpu:a tag"], "--tag: 'cpu:a tag'"),
        (["--registry", "Reg/Team"], "--registry: 'Reg/Team'"),
        (["--registry", "reg.example", "--tag", "x//y"], "--tag: 'reg.example/x//y'"),
    ],
)
def test_a_tag_or_registry_that_is_no_image_reference_is_refused_before_rendering(tmp_path, flags, shown):
    """The engine would refuse the name only after the build (a traceback): exit 2 before anything is rendered,
    with no engine needed."""
    out = tmp_path / "ctx"
    result = CliRunner().invoke(
        main, ["image", "--flavor", "cpu", "--torch", "2.13", "-o", str(out), "--no-record", *flags]
    )
    assert result.exit_code == 2, result.output
    assert f"{shown} is not an image reference" in " ".join(result.output.split())
    assert not out.exists()


def test_run_workload_help_names_the_workload_arguments():
    shown = CliRunner().invoke(main, ["run", "workload", "--help"], terminal_width=200).output
    assert "-- --labels auto" in shown and "--labels a,b,c" in shown and "python -m workload train --help" in shown


def _matrix_rows(db) -> dict[str, list]:
    import sqlite3

    with sqlite3.connect(db) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {t: conn.execute(f'SELECT * FROM "{t}"').fetchall() for t in tables}


@pytest.mark.parametrize("device", ["cpu0", "autoxyz", "cpu --x"])
def test_a_device_typo_is_bad_input_before_the_run_and_the_matrix_is_unchanged(tmp_path, device):
    """`cpu0` once started the run, failed inside torch and was recorded as a failure of the cpu cell."""
    from builder.store.store import MatrixStore
    from matrix_fixtures import cpu_result

    db, out = tmp_path / "m.db", tmp_path / "out"
    with MatrixStore.open(db) as store:
        store.record_run(cpu_result())  # a matrix with one measurement in it already
    before = _matrix_rows(db)
    assert before["runs"]
    result = CliRunner().invoke(
        main,
        [
            "run",
            "workload",
            "--local",
            "--out",
            str(out),
            "--db",
            str(db),
            "--",
            "--device",
            device,
            "--max-steps",
            "1",
            "--no-probes",
        ],
    )
    assert result.exit_code == 2, result.output
    assert f"--device {device}: must be auto, cpu, cuda or cuda:N" in result.output
    assert "nothing recorded" in result.output and "Traceback" not in result.output
    assert _matrix_rows(db) == before  # no run row, no attempt
    assert not out.exists()


@pytest.mark.parametrize(
    "command",
    [
        ["run", "workload", "--local", "--out", "LONG"],
        ["run", "workload", "--local", "--data", "LONG"],
        ["run", "workload", "--local", "--model", "LONG"],
        ["render", "--rocm", "6.2", "--torch", "2.5", "-o", "LONG"],
        ["report", "-o", "LONG/site"],
    ],
)
def test_a_path_the_file_system_cannot_name_is_bad_input_and_nothing_is_left(tmp_path, command):
    """A part of a path over the file system's 255-byte limit is the user's path: exit 2 naming it, no traceback,
    no matrix, marker or output folder left behind."""
    long = tmp_path / ("n" * 300)
    args = [str(long) if a == "LONG" else a.replace("LONG", str(long)) for a in command]
    if command[0] == "run":
        args += [] if "--out" in command else ["--out", str(tmp_path / "out")]
    result = CliRunner().invoke(main, [*args, "--db", str(tmp_path / "m.db")] if command[0] != "render" else args)
    assert result.exit_code == 2, result.output
    assert f"Error: {str(long)[:300]!r}: a name in this path is longer than the file system allows" in result.output
    assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [], list(tmp_path.iterdir())
