"""`envbuild run workload --venv PATH` (and `--local --python PATH`): a venv envbuild did not build, measured as it
is. The stand-in venv is a real venv whose site-packages links this venv's torch 2.13.0+cpu and HF stack but for peft
and accelerate, which the run brings in read-only from the lock (pip, from PyPI, into this test's cache). A hostile
venv (a `.pth` file runs its code at every start) records what it was given and misbehaves."""

from __future__ import annotations

import json
import os
import sysconfig
import venv
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.engine import venv_route
from builder.store.store import MatrixStore

SHORT = ["--", "--max-steps", "4", "--min-accuracy", "0", "--no-probes"]
LACKING = ("peft", "accelerate")
SECRETS = {"HF_TOKEN": "hf_secret_token", "AWS_SECRET_ACCESS_KEY": "aws-secret", "GITHUB_TOKEN": "ghp_secret"}


def _users_venv(root: Path, pth: str | None = None) -> Path:
    """A venv with this venv's distributions linked in, but peft, accelerate and envbuild itself."""
    venv.create(root, with_pip=False)
    site = next(root.glob("lib/python3*/site-packages"))
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        skip = entry.name.startswith((*LACKING, "__editable__", "envbuild", "builder", "workload", "_virtualenv"))
        if not skip and not entry.name.endswith(".pth"):
            (site / entry.name).symlink_to(entry)
    if pth:
        (site / "zz_hostile.pth").write_text(pth)
    return root


def _file_list(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root`, links followed: path -> (size, mtime in ns)."""
    found = {}
    for folder, _, files in os.walk(root, followlinks=True):
        for name in files:
            path = Path(folder, name)
            stat = path.stat()
            found[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return found


@pytest.fixture
def environ(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # what is brought in, cached under the test
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


def _run(*args: str):
    return CliRunner().invoke(main, ["run", "workload", *args], catch_exceptions=False)


def test_a_venv_is_measured_as_it_is_and_left_unchanged(tmp_path, environ):
    """Its own torch runs; peft and accelerate come in from recipes/locks/torch2.13-py3.11.txt, read-only and never
    into it: the venv's file list (paths, sizes, mtimes) is the same before and after, and the cell is the one its
    torch and Python make."""
    users = _users_venv(tmp_path / "users-venv")
    before = _file_list(users)
    out, db = tmp_path / "out", tmp_path / "m.db"
    ran = _run("--venv", str(users), "--out", str(out), "--db", str(db), *SHORT)
    assert ran.exit_code == 0, ran.output
    assert _file_list(users) == before
    result = json.loads((out / "result.json").read_text())
    assert result["versions"]["torch"] == "2.13.0+cpu" and result["status"] == "pass"
    block = result["environment"]
    assert block["route"] == "venv" and block["brought_in"]["lock"] == "torch2.13-py3.11"
    assert set(block["brought_in"]["packages"]) == set(LACKING)
    assert block["probe"]["torch_path"] == "lib/python3.11/site-packages/torch/__init__.py"
    assert block["files"] == {"python": "3.11", "torch": "2.13.0+cpu", "hip": None, "cuda": None}
    assert str(tmp_path) not in json.dumps(block)  # no folder of this machine in a result
    assert result["invocation"]["envbuild"][:5] == ["envbuild", "run", "workload", "--venv", "VENV"]
    with MatrixStore.open(db) as store:
        [row] = store.runs()
    assert row["cell_key"] == "cpu-torch2.13-py3.11" and row["counts"]
    assert "bringing in the workload and " in ran.output and "nothing is installed into it" in ran.output


HOSTILE = (
    "import json, os, sys; open({leak!r}, 'a').write(json.dumps({{'env': dict(os.environ), "
    "'nobytecode': sys.flags.dont_write_bytecode}}) + chr(10)); "
    "os.environ.get('PYTHONPATH') and ({act})\n"
)


def test_a_hostile_venv_gets_no_secret_no_home_and_is_stopped_at_its_time_limit(tmp_path, environ, monkeypatch):
    """The venv's code runs at every start (a .pth line): it sees none of this shell's secrets, a HOME of its own,
    writes no bytecode; when the workload's run floods its output and then hangs, the output is cut at the limit
    and the run is stopped at the time limit (monkeypatched short here): an error with class `timeout`."""
    leak = tmp_path / "leak.jsonl"
    act = "[print('x' * 1000, flush=True) for _ in range(2000)] and __import__('time').sleep(600)"
    users = _users_venv(tmp_path / "users-venv", HOSTILE.format(leak=str(leak), act=act))
    monkeypatch.setattr(venv_route, "RUN_TIME_LIMIT_S", 8)
    monkeypatch.setattr(venv_route, "RUN_OUTPUT_CHARS", 50_000)
    out = tmp_path / "out"
    ran = _run("--local", "--python", str(users / "bin" / "python"), "--out", str(out), "--no-record", *SHORT)
    assert ran.exit_code == 1, ran.output
    result = json.loads((out / "result.json").read_text())
    assert (result["status"], result["error_class"]) == ("error", "timeout")
    log = (out / "workload.log").read_text()
    assert len(log) < 60_000 and "the output passed 50000 characters" in log
    seen = [json.loads(line) for line in leak.read_text().splitlines()]
    assert len(seen) >= 2  # the probe and the workload's run (and any Python it starts)
    for start in seen:
        assert not set(SECRETS) & set(start["env"]) and start["env"]["HOME"] != os.environ.get("HOME")
        assert start["nobytecode"] and not Path(start["env"]["HOME"]).exists()  # its folder went with the run


def test_a_venv_whose_run_contradicts_its_files_is_an_attempt_never_a_verdict(tmp_path, environ):
    """torch's metadata in the venv says 2.99.0, the torch that runs says 2.13.0+cpu: the host read the files, so the
    run is refused as the venv's own input error (recorded as an attempt, never the cell's verdict)."""
    users = _users_venv(tmp_path / "users-venv")
    site = next(users.glob("lib/python3*/site-packages"))
    [real] = site.glob("torch-*.dist-info")
    real.unlink()
    fake = site / "torch-2.99.0.dist-info"
    fake.mkdir()
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.99.0\n")
    out, db = tmp_path / "out", tmp_path / "m.db"
    ran = _run("--venv", str(users), "--out", str(out), "--db", str(db), *SHORT)
    assert ran.exit_code == 1, ran.output
    result = json.loads((out / "result.json").read_text())
    assert result["error_class"] == "input_error" and "torch 2.13.0+cpu (its files: 2.99.0)" in result["error"]
    with MatrixStore.open(db) as store:
        [row] = store.runs()
    assert not row["counts"]


def test_a_path_with_no_python_is_bad_input(tmp_path, environ):
    ran = _run("--venv", str(tmp_path), "--out", str(tmp_path / "out"), "--no-record")
    assert ran.exit_code == 2 and "no Python there" in ran.output
    both = _run("--venv", str(tmp_path), "--image", "x", "--no-record")
    assert both.exit_code == 2 and "exclude each other" in both.output
