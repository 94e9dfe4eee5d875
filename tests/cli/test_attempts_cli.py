"""What the matrix shows after user errors, interruptions and SIGTERM: attempts with their own records, never verdicts.

Real CLI processes, a real matrix file, real workload runs on the CPU and the real engine for builds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import docker.errors
import pytest

from sleeper_fixtures import sleeper_dockerfile, step_started

ENVBUILD = [sys.executable, "-c", "from builder.cli import main; main()"]
RESULTS = Path(__file__).parents[1] / "data" / "results"
KEY = "cpu-torch2.13-py3.11"


def envbuild(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*ENVBUILD, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def passing_cell(tmp_path: Path) -> Path:
    """A matrix whose cpu cell passed (the result of a real smoke run)."""
    db = tmp_path / "m.db"
    shutil.copytree(RESULTS, tmp_path / "seed", ignore=lambda d, names: [n for n in names if n != "smoke-pass.json"])
    (tmp_path / "seed" / "smoke-pass.json").rename(tmp_path / "seed" / "result.json")
    assert envbuild("matrix", "import", str(tmp_path / "seed"), "--db", str(db), cwd=tmp_path).returncode == 0
    return db


def listed(db: Path) -> dict:
    shown = envbuild("matrix", "list", "--json", "--db", str(db), cwd=db.parent)
    assert shown.returncode == 0, shown.stderr
    return {line["key"]: line for line in json.loads(shown.stdout)}


def records(db: Path, key: str = KEY) -> list[dict]:
    """`matrix show --json`'s `records`: every build and run with its outcome and attempt directory."""
    shown = envbuild("matrix", "show", key, "--json", "--db", str(db), cwd=db.parent)
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)["records"]


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def processes_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.docker
def test_a_typo_d_base_image_is_an_attempt_with_its_own_record(tmp_path, docker_engine):
    db = passing_cell(tmp_path)
    builds = [
        envbuild(
            "image",
            "--flavor",
            "cpu",
            "--torch",
            "2.13",
            "--base-image",
            "does-not-exist:1",
            "-o",
            str(tmp_path / "ctx"),
            "--network",
            "host",
            "--db",
            str(db),
            cwd=tmp_path,
        )
        for _ in range(2)
    ]
    for build in builds:
        assert build.returncode == 1, build.stderr[-2000:]
        assert "base_image_unavailable" in build.stderr
    cell = listed(db)[KEY]
    assert (cell["status"], cell["failure_class"], cell["runs"], cell["attempts"]) == ("pass", None, 1, 2)
    first, second = [a for a in records(db) if a["kind"] == "build"]
    assert first["outcome"] == second["outcome"] == "fail build:base_image_unavailable (attempt)"
    assert first["attempt_dir"] != second["attempt_dir"]
    for attempt in (first, second):
        folder = Path(attempt["attempt_dir"])
        assert folder.parent == tmp_path / "envbuild-attempts"
        assert (folder / "build.log").read_text().startswith("# builder: ")
        assert "does-not-exist:1" in (folder / "context" / "Dockerfile").read_text()
        record = json.loads((folder / "attempt.json").read_text())
        assert (record["status"], record["failure_class"], record["id"]) == (
            "fail",
            "base_image_unavailable",
            attempt["id"],
        )


def test_an_unknown_preset_is_bad_input_and_leaves_the_cell_alone(tmp_path):
    """A typo'd preset is refused by the workload with its bad-input line: exit 2, no result, nothing recorded
    (not process_died, not a verdict, not even an attempt); the passing cell stays as it was."""
    db = passing_cell(tmp_path)
    before = records(db)
    run = envbuild(
        "run",
        "workload",
        "--local",
        "--preset",
        "nosuch",
        "--out",
        str(tmp_path / "out"),
        "--db",
        str(db),
        cwd=tmp_path,
    )
    assert run.returncode == 2, run.stderr[-2000:]
    assert "invalid choice: 'nosuch'" in run.stderr and "nothing recorded" in run.stderr
    assert not (tmp_path / "out" / "result.json").exists()
    cell = listed(db)[KEY]
    assert (cell["status"], cell["runs"], cell["attempts"]) == ("pass", 1, 0)
    assert records(db) == before


def test_bad_data_is_bad_input_and_leaves_the_cell_alone(tmp_path):
    db = passing_cell(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "no label here"}\n' * 20)
    run = envbuild(
        "run", "workload", "--local", "--data", str(bad), "--out", str(tmp_path / "out"), "--db", str(db), cwd=tmp_path
    )
    assert run.returncode == 2, run.stderr[-2000:]
    assert "bad.jsonl:1: missing column(s) ['label']" in run.stderr
    assert not (tmp_path / "out" / "result.json").exists()
    cell = listed(db)[KEY]
    assert (cell["status"], cell["runs"], cell["attempts"]) == ("pass", 1, 0)


def start_training(tmp_path: Path, db: Path) -> subprocess.Popen:
    """`envbuild run workload --local` recording into `db`, returned once training steps are printed."""
    proc = subprocess.Popen(
        [*ENVBUILD, "run", "workload", "--local", "--out", str(tmp_path / "out"), "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    deadline, seen = time.monotonic() + 180, ""
    while time.monotonic() < deadline and "step" not in seen:
        seen += proc.stdout.readline()
    assert "step" in seen, seen
    return proc


@pytest.mark.parametrize("sig, code, how", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")])
def test_a_stopped_local_run_is_an_attempt_however_often_the_signal_comes(tmp_path, sig, code, how):
    """The signal sent again every 20 ms until envbuild exits (a user pressing Ctrl-C while it stops): the first one
    stops the run, the others are ignored through the clean-up, the recording and the interpreter's exit."""
    db = passing_cell(tmp_path)
    proc = start_training(tmp_path, db)
    (workload,) = children(proc.pid)
    output = []
    reader = threading.Thread(target=lambda: output.append(proc.stdout.read()))
    reader.start()
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        time.sleep(0.02)
    reader.join(timeout=60)
    output = output[0] if output else ""
    assert proc.returncode == code, output[-3000:]
    assert not alive(workload)
    assert f"interrupted ({how})" in output
    out = tmp_path / "out"
    assert f"# envbuild: interrupted ({how}); stopping the workload" in (out / "workload.log").read_text()
    result = json.loads((out / "result.json").read_text())
    assert (result["status"], result["error_class"]) == ("error", "interrupted")
    cell = listed(db)[KEY]
    assert (cell["status"], cell["runs"], cell["attempts"], cell["flaky"]) == ("pass", 1, 1, False)


@pytest.mark.docker
@pytest.mark.parametrize("sig, code, how", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")])
def test_a_stopped_build_stops_its_client_tags_nothing_and_is_an_attempt(
    tmp_path, local_base, docker_engine, sig, code, how
):
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    dockerfile = sleeper_dockerfile(local_base)
    (ctx / "Dockerfile").write_text(dockerfile)
    cell = {"flavor": "cpu", "accel_version": None, "torch": "2.13", "arch": None, "python": "3.11"}
    (ctx / "manifest.json").write_text(json.dumps({"cell": cell, "base_image": local_base, "context_hash": "f" * 64}))
    tag = f"envbuild-test/sigterm:{os.getpid()}-{time.time_ns()}"
    db = tmp_path / "m.db"
    proc = subprocess.Popen(
        [*ENVBUILD, "image", "--context", str(ctx), "--tag", tag, "--network", "host", "--force", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    deadline, log = time.monotonic() + 120, None
    while time.monotonic() < deadline:
        logs = list((tmp_path / "envbuild-attempts").glob("*/build.log"))
        if logs and step_started(logs[0].read_text()):
            log = logs[0]
            break
        time.sleep(0.5)
    assert log is not None, "the build never reached its RUN step"
    clients = processes_naming(tag)
    assert clients, "no build client names the tag"
    proc.send_signal(sig)
    output, _ = proc.communicate(timeout=90)
    assert proc.returncode == code, output
    assert f"build interrupted ({how}); nothing was tagged" in output
    assert [pid for pid in clients if alive(pid)] == []  # the docker client went with envbuild
    text = log.read_text()
    assert f"# interrupted ({how}); stopping the build client" in text
    assert f"# build stopped ({how}); nothing was tagged" in text
    with pytest.raises(docker.errors.ImageNotFound):
        docker_engine.images.get(tag)
    line = listed(db)[KEY]
    assert (line["status"], line["runs"], line["attempts"]) == ("untested", 0, 1)
    (attempt,) = records(db)
    assert attempt["outcome"] == "fail build:interrupted (attempt)"
    assert Path(attempt["attempt_dir"]) == log.parent
    assert (log.parent / "context" / "Dockerfile").read_text() == dockerfile


def test_an_unwritable_attempts_folder_is_bad_input_before_building(tmp_path):
    from click.testing import CliRunner

    from builder.cli import main

    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("FROM scratch\n")
    cell = {"flavor": "cpu", "accel_version": None, "torch": "2.13", "arch": None, "python": "3.11"}
    (ctx / "manifest.json").write_text(json.dumps({"cell": cell}))
    locked = tmp_path / "envbuild-attempts"
    locked.mkdir()
    if os.geteuid() != 0:
        locked.chmod(0o555)
    elif subprocess.run(["chattr", "+i", str(locked)], capture_output=True).returncode != 0:
        pytest.skip("running as root without chattr: no way to make a directory unwritable")
    try:
        result = CliRunner().invoke(
            main, ["image", "--context", str(ctx), "--tag", "envbuild-test/never:1", "--db", str(tmp_path / "m.db")]
        )
    finally:
        subprocess.run(["chattr", "-i", str(locked)], capture_output=True)
        locked.chmod(0o755)
    assert result.exit_code == 2, result.output
    assert "cannot create the attempt record" in result.output and "--no-record" in result.output
    assert list(locked.iterdir()) == []
