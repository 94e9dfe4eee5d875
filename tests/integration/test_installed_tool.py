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
def wheel(tmp_path_factory) -> Path:
    """The wheel built from this tree."""
    root = tmp_path_factory.mktemp("wheel")
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
    return next(dist.glob("envbuild-*.whl"))


def _venv_with(root: Path, wheel: Path, deps: Path) -> tuple[Path, Path]:
    """A fresh venv holding only `wheel`, its dependencies visible through a path line to `deps`; (its python,
    its purelib)."""
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
    (purelib / "locked-deps.pth").write_text(f"{deps}\n")
    return python, purelib


@pytest.fixture(scope="module")
def installed(tmp_path_factory, wheel):
    """(envbuild executable, environment, a folder outside the clone)."""
    root = tmp_path_factory.mktemp("installed")
    env_dir = root / "venv"
    _venv_with(root, wheel, Path(sysconfig.get_paths()["purelib"]))
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


#: What `envbuild[workload]` adds to a plain install: never in the light tool's environment.
WORKLOAD_ONLY = re.compile(
    r"^(torch|transformers|peft|accelerate|sentencepiece|safetensors|tokenizers|huggingface_hub|hf_xet|triton)"
    r"([-_.].*)?$|^(nvidia|cuda)[-_]",
    re.I,
)
CPU_WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")


@pytest.fixture(scope="module")
def light(tmp_path_factory, wheel):
    """`pipx install envbuild` without the workload extra: the wheel in a fresh venv that sees envbuild's own
    dependencies (this venv's, by links) and none of the workload's (no torch, no transformers). (envbuild, env,
    a folder outside the clone.)"""
    root = tmp_path_factory.mktemp("light")
    deps = root / "tool-deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not WORKLOAD_ONLY.match(entry.name) and not entry.name.startswith(("__editable__", "envbuild")):
            (deps / entry.name).symlink_to(entry)
    python, _ = _venv_with(root, wheel, deps)
    (python.parent / "uv").symlink_to(Path(sysconfig.get_paths()["scripts"]) / "uv")  # the uv wheel's binary
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ENVBUILD_HOME", "ENVBUILD_RECIPES")},
        "XDG_CACHE_HOME": str(root / "cache"),  # the managed environment, made under this test's folder
        "UV_CACHE_DIR": str(root / "uv-cache"),
        "UV_PYTHON_DOWNLOADS": "never",
        "ENVBUILD_TORCH_INDEX_URL": str(CPU_WHEEL.parent),  # a mirror of the CPU index: the file it serves
    }
    return python.parent / "envbuild", env, elsewhere


def test_a_tool_install_without_the_workload_extra_trains_in_a_managed_cpu_torch(light):
    """On this CPU-only machine, `run workload --local` from a light install makes envbuild's own environment: the
    CPU cell's torch (2.13.0+cpu, hash-checked against the recorded sha256) and its lock's stack, no CUDA package;
    the tool's own environment never gets torch. The next run takes the cached environment."""
    if not CPU_WHEEL.is_file():
        pytest.skip("no local copy of the CPU index's wheel (download.pytorch.org is not reachable from here)")
    exe, env, cwd = light
    assert subprocess.run([str(exe.parent / "python"), "-c", "import torch"], env=env, capture_output=True).returncode
    args = ["run", "workload", "--local", "--no-record", "--", "--max-steps", "4", "--min-accuracy", "0", "--no-probes"]
    first = _run(light, *args[:4], "--out", "first", *args[4:])
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "making the workload environment" in first.stderr and "cpu-torch2.13-py3.11" in first.stderr
    result = json.loads((cwd / "first" / "result.json").read_text())
    assert result["versions"]["torch"] == "2.13.0+cpu" and result["hardware"]["device_type"] == "cpu"
    block = result["environment"]
    assert (block["route"], block["cell"], block["lock"], block["from_mirror"]) == (
        "managed",
        "cpu-torch2.13-py3.11",
        "torch2.13-py3.11",
        True,
    )
    assert "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b" in block["torch_sha256"]
    [made] = (Path(env["XDG_CACHE_HOME"]) / "envbuild" / "workload-envs").glob("cpu-torch2.13-py3.11-*/")
    names = [d.name for d in made.glob("lib/python3*/site-packages/*.dist-info")]
    assert any(n.startswith("torch-2.13.0+cpu") for n in names)
    assert not [n for n in names if re.match(r"(nvidia|cuda|triton)", n, re.I)], names
    second = _run(light, *args[:4], "--data", str(cwd / "no-such.jsonl"))  # refused after the environment is found
    assert second.returncode == 2 and "(cached;" in second.stderr, second.stderr[-2000:]
