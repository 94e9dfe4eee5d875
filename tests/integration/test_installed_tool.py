"""envbuild installed like a tool: the wheel built from this tree, installed non-editable into a fresh venv,
works from a folder outside the clone (its recipes, templates, CI data and published results ship inside it).

The fresh venv gets only the wheel; its dependencies are the locked ones of the venv running the tests, made
visible by a path line (not a site dir: the editable envbuild's own .pth files there are not processed), so no
copy of the source tree can be imported."""

from __future__ import annotations

import json
import re
import signal
import time
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from repo import REPO_ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(envbuild executable, environment, a folder outside the clone)."""
    root = tmp_path_factory.mktemp("installed")
    src, dist = root / "src", root / "dist"  # a copy: setuptools writes build/ and *.egg-info beside the sources
    for name in ("pyproject.toml", "README.md"):
        (src / name).parent.mkdir(exist_ok=True)
        shutil.copy2(REPO_ROOT / name, src / name)
    for name in ("builder", "workload", "recipes", "images", "ci", "results"):
        shutil.copytree(
            REPO_ROOT / name, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(dist.glob("envbuild-*.whl"))
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (purelib / "locked-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ENVBUILD_HOME", "ENVBUILD_RECIPES")}
    return env_dir / "bin" / "envbuild", env, elsewhere


def _run(installed, *args, timeout=600):
    exe, env, cwd = installed
    return subprocess.run([str(exe), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_wheel_imports_itself_not_the_clone(installed):
    exe, env, cwd = installed
    where = subprocess.run(
        [
            str(exe.parent / "python"),
            "-c",
            "import builder, workload; print(builder.__file__);print(workload.__file__)",
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    for line in where.stdout.split():
        assert Path(line).is_relative_to(exe.parent.parent) and not Path(line).is_relative_to(REPO_ROOT), line
    data = exe.parent.parent.glob("lib/python*/site-packages/builder/_data/recipes/flavors.toml")
    assert [p for p in data if not p.is_symlink()]  # a copy in the wheel, not a link back to the tree


def test_help_recipes_and_render_work_outside_the_clone(installed, tmp_path):
    assert _run(installed, "--help").returncode == 0
    listed = _run(installed, "recipes", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "cpu-torch2.13-py3.11" in {row["cell"] for row in json.loads(listed.stdout)}
    rendered = _run(installed, "render", "--flavor", "cpu", "--torch", "2.13", "-o", str(tmp_path / "ctx"))
    assert rendered.returncode == 0, rendered.stderr
    # the same request rendered from the source tree gives the same context hash
    tree = subprocess.run(
        [
            sys.executable,
            "-c",
            "from builder.cli import main; main()",
            "render",
            "--flavor",
            "cpu",
            "--torch",
            "2.13",
            "-o",
            str(tmp_path / "tree-ctx"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert tree.returncode == 0, tree.stderr
    manifests = [json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("ctx", "tree-ctx")]
    assert manifests[0]["context_hash"] == manifests[1]["context_hash"]


def test_a_local_run_is_recorded_and_reported_outside_the_clone(installed):
    run = _run(installed, "run", "workload", "--local")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "recorded in envbuild-matrix.db" in run.stdout + run.stderr
    assert (installed[2] / "envbuild-matrix.db").is_file()
    report = _run(installed, "report", "-o", "site")
    assert report.returncode == 0, report.stderr
    assert (installed[2] / "site" / "index.html").is_file()
    verify = _run(installed, "matrix", "verify")  # the published results and their signers ship too
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.parametrize("when, presses", [("the first step", 1), ("the last step", 1), ("the first step", 3)])
def test_ctrl_c_in_the_installed_tool_records_an_interrupted_attempt(installed, when, presses):
    """A terminal's Ctrl-C reaches the whole process group (envbuild and its workload), during training or after
    its last step, once or pressed again while the run stops: the run exits 130 and is recorded as an
    `interrupted` attempt."""
    exe, env, cwd = installed
    folder = cwd / f"{when.replace(' ', '-')}-{presses}"
    folder.mkdir()
    proc = subprocess.Popen(
        [
            str(exe),
            "run",
            "workload",
            "--local",
            "--out",
            "out",
            "--",
            "--max-steps",
            "40",
            "--min-accuracy",
            "0",
            "--no-probes",
        ],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    pattern = re.compile(r"step \d+/\d+" if when == "the first step" else r"step (\d+)/\1\b")
    deadline, seen = time.monotonic() + 300, ""
    while time.monotonic() < deadline and not pattern.search(seen):
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    for _ in range(presses):
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.5)
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, seen + output
    assert "before the workload started" not in output, seen + output
    record = json.loads((folder / "out" / "result.json").read_text())
    assert record["error_class"] == "interrupted", record.get("error")
    exported = subprocess.run(
        [str(exe), "matrix", "export", "--json"], cwd=folder, env=env, capture_output=True, text=True, timeout=120
    )
    assert exported.returncode == 0 and record["run_id"] in exported.stdout, exported.stdout + exported.stderr
