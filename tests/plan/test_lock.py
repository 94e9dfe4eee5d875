"""Dependency locks (recipes/locks/, `envbuild lock`): complete, fresh, refused when stale, reproducible.

The resolving tests run uv against PyPI for real (this machine and CI reach PyPI); the rest read the
committed locks and copies of recipes/ with one pin changed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.paths import RECIPES_DIR
from builder.plan.lock import keys, parse, read
from builder.plan.lock_names import LockError, lock_key
from builder.plan.recipes import load
from builder.plan.render import RenderError, context_files
from builder.plan.resolve import Request, resolve

ROOT = Path(__file__).resolve().parents[2]


def _copy(tmp_path: Path) -> Path:
    """ENVBUILD_HOME with a copy of recipes/ (the lock command reads nothing else)."""
    home = tmp_path / "home"
    shutil.copytree(RECIPES_DIR, home / "recipes")
    return home


def _envbuild(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "ENVBUILD_HOME": str(home)},
        timeout=600,
    )


def _pin(home: Path, old: str, new: str) -> None:
    path = home / "recipes" / "hf-stack.toml"
    text = path.read_text()
    assert text.count(old) >= 1
    path.write_text(text.replace(old, new))


def test_every_cell_has_a_fresh_lock_and_no_lock_is_unused():
    result = CliRunner().invoke(main, ["lock", "--check"])
    assert result.exit_code == 0, result.output
    recipes = load()
    assert len(keys(recipes)) == len(result.output.splitlines()) == len(list((RECIPES_DIR / "locks").glob("*.txt")))


def test_a_lock_holds_the_whole_closure_with_hashes_and_leaves_torch_to_its_stage():
    recipes = load()
    lock = read(recipes, "2.13", "3.11")
    stack = lock.versions("stack")
    assert "torch" not in stack and not any(n.startswith("nvidia-") or n == "triton" for n in stack)
    # the pins, torch 2.13's own requirements (setuptools>=77.0.3 in the CPU wheel's METADATA) and transitive ones
    assert {k: stack[k] for k in recipes.stacks["2.13"]} == recipes.stacks["2.13"]
    assert {"sympy", "mpmath", "networkx", "jinja2", "markupsafe", "filelock", "fsspec", "typing-extensions"} <= set(
        stack
    )
    assert int(stack["setuptools"].split(".")[0]) >= 77
    assert lock.versions("venv") == recipes.build_tools.venv
    assert all(len(e.hashes) >= 1 for s in ("venv", "stack") for e in lock.entries(s))
    assert "nvidia-cublas" in lock.from_torch_index and "triton" in lock.from_torch_index


def test_the_context_installs_the_lock_with_hashes_in_the_stage_that_needs_it():
    plan = resolve(Request(flavor="cpu", torch="2.13"))
    files, manifest = context_files(plan)
    lock = read(load(), "2.13", "3.11")
    assert files["requirements.lock"].decode().endswith(lock.requirements("stack"))
    assert files["venv.lock"].decode().endswith(lock.requirements("venv"))
    assert re.findall(r"^(\S+)==", files["sentencepiece.lock"].decode(), re.M) == ["sentencepiece"]
    assert manifest["lock"]["sha256"] == lock.sha256 and manifest["lock"]["packages"] == lock.versions("stack")
    assert manifest["labels"]["io.envbuild.lock"] == f"torch2.13-py3.11@sha256:{lock.sha256}"
    scripts = {
        name: files[f"common/{name}"].decode()
        for name in ("install_python.sh", "install_python_stack.sh", "build_sentencepiece.sh")
    }
    assert all("--require-hashes" in text for text in scripts.values())


def test_a_changed_pin_makes_the_lock_stale_and_render_says_what_to_run(tmp_path):
    home = _copy(tmp_path)
    _pin(home, 'transformers = "4.44.2"', 'transformers = "4.44.1"')
    recipes = load(home / "recipes")
    plan = resolve(Request(accel_version="6.2", torch="2.4"), recipes)
    with pytest.raises(
        RenderError, match=r"torch2\.4-py3\.10\.txt is stale.*`envbuild lock --torch 2\.4 --python 3\.10`"
    ):
        context_files(plan)
    check = _envbuild(home, "lock", "--check", "--torch", "2.4")
    assert check.returncode == 1
    assert len(re.findall(r"^stale ", check.stdout, re.M)) == 4  # Python 3.9-3.12 of the 2.4 line
    render = _envbuild(home, "render", "--rocm", "6.2", "--torch", "2.4", "-o", str(tmp_path / "ctx"))
    assert render.returncode == 2 and "envbuild lock --torch 2.4 --python 3.10" in render.stderr
    assert not (tmp_path / "ctx").exists()


def test_a_missing_unused_or_hand_edited_lock_is_named(tmp_path):
    home = _copy(tmp_path)
    locks = home / "recipes" / "locks"
    (locks / "torch2.13-py3.11.txt").rename(locks / "torch2.2-py3.11.txt")
    check = _envbuild(home, "lock", "--check")
    assert check.returncode == 1
    assert "missing  recipes/locks/torch2.13-py3.11.txt" in check.stdout
    assert "unused   locks/torch2.2-py3.11.txt" in check.stdout
    text = (locks / "torch2.2-py3.11.txt").read_text()
    edited = re.sub(r"(accelerate==1\.16\.0 \\\n)(    --hash=sha256:\w+ \\\n    --hash=sha256:\w+\n)", r"\1", text)
    assert edited != text
    with pytest.raises(LockError, match=r"x\.txt:\d+: accelerate==1\.16\.0 has no --hash lines"):
        parse(edited, "x.txt")
    with pytest.raises(LockError, match=r"x\.txt:\d+: expected NAME==VERSION, got 'accelerate>=1; rm -rf /"):
        parse(text.replace("accelerate==1.16.0 \\", "accelerate>=1; rm -rf / \\"), "x.txt")
    with pytest.raises(LockError, match=r"expected --hash=sha256:<64 hex>"):
        parse(text.replace("--hash=sha256:", "--hash=md5:", 1), "x.txt")
    with pytest.raises(LockError, match="dotted numbers"):
        lock_key("../../etc/x", "3.11")


@pytest.mark.slow
def test_lock_writes_only_what_is_stale_and_the_result_installs_the_new_pin(tmp_path):
    """`envbuild lock` against PyPI: re-resolves the stale locks of the changed line, leaves the others."""
    home = _copy(tmp_path)
    _pin(home, 'transformers = "4.44.2"', 'transformers = "4.44.1"')
    untouched = (home / "recipes" / "locks" / "torch2.13-py3.11.txt").read_bytes()
    date = read(load(), "2.4", "3.10").header["exclude-newer"]
    proc = _envbuild(home, "lock", "--torch", "2.4", "--python", "3.10", "--exclude-newer", date)
    assert proc.returncode == 0, proc.stderr
    assert "wrote    recipes/locks/torch2.4-py3.10.txt" in proc.stdout
    lock = read(load(home / "recipes"), "2.4", "3.10")
    assert lock.versions("stack")["transformers"] == "4.44.1"
    assert _envbuild(home, "lock", "--check", "--torch", "2.4", "--python", "3.10").returncode == 0
    assert (home / "recipes" / "locks" / "torch2.13-py3.11.txt").read_bytes() == untouched
    again = _envbuild(home, "lock", "--torch", "2.13")
    assert again.returncode == 0 and "up to date" in again.stdout


@pytest.mark.slow
def test_a_lock_resolves_again_to_the_same_files_and_a_changed_hash_is_caught(tmp_path):
    """Re-resolved in this session, so PyPI's view moving on (a release the committed lock predates, which
    `envbuild lock --verify` reports and .ci/newest_releases.py's run covers) cannot fail it; what it checks is
    the tool: the same resolution twice, and a hash that differs from the index's is caught."""
    home = _copy(tmp_path)
    assert (
        _envbuild(home, "lock", "--torch", "2.13", "--refresh", "--exclude-newer", "2026-12-03T00:00:00Z").returncode
        == 0
    )
    ok = _envbuild(home, "lock", "--verify", "--torch", "2.13")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "same     recipes/locks/torch2.13-py3.11.txt" in ok.stdout
    path = home / "recipes" / "locks" / "torch2.13-py3.11.txt"
    text = path.read_text()
    first = re.search(r"peft==0\.21\.2 \\\n    --hash=sha256:(\w+)", text).group(1)
    path.write_text(text.replace(first, "0" * 64))
    proc = _envbuild(home, "lock", "--verify", "--torch", "2.13")
    assert proc.returncode == 1
    assert "[stack] peft 0.21.2: the index serves other files than locked" in proc.stdout


def test_a_torch_line_that_is_not_a_version_is_refused_before_it_names_a_file(tmp_path):
    home = _copy(tmp_path)
    torch = home / "recipes" / "torch.toml"
    torch.write_text(torch.read_text().replace('[torch."2.5"]', '[torch."../../x"]'))
    proc = _envbuild(home, "lock", "--check")
    assert proc.returncode == 2, proc.stderr  # bad input (the recipes), not a failed lock
    assert "dotted number" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.rglob("x.txt"))
