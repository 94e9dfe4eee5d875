"""`.ci/mutation.sh` (docs/mutation.md): its configuration names real modules and test files, and a Python
without cosmic-ray or an unknown module is a clear exit 2 that runs and writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

from repo import REPO_ROOT

SCRIPT = REPO_ROOT / ".ci" / "mutation.py"


def _run(*args: str, python: tuple[str, ...] = (sys.executable,), out=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "MUTATION_OUT": str(out)} if out else None
    return subprocess.run([*python, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def test_every_configured_module_and_test_file_exists_and_is_listed():
    modules = tomllib.loads((REPO_ROOT / ".ci" / "mutation.toml").read_text())["modules"]
    listed = _run("--list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == list(modules)
    for (name, module), line in zip(modules.items(), lines):
        assert (REPO_ROOT / module["path"]).is_file(), name
        for test in module["tests"]:
            assert (REPO_ROOT / test).is_file(), (name, test)
            assert test in line


def test_a_python_without_cosmic_ray_is_told_how_to_get_it_and_nothing_runs(tmp_path):
    # -S: no site-packages, so no cosmic-ray (the standard library, which the script needs, stays)
    result = _run("provenance", python=(sys.executable, "-S"), out=tmp_path / "out")
    assert result.returncode == 2
    assert "has no cosmic-ray" in result.stderr and "MUTATION_PYTHON" in result.stderr
    assert "baseline" not in result.stdout and not (tmp_path / "out").exists()


def test_an_unknown_module_is_refused_with_the_choices(tmp_path):
    result = _run("provenence", out=tmp_path / "out")
    assert result.returncode == 2 and "unknown module(s) provenence" in result.stderr
    assert "provenance" in result.stderr.split("pick from", 1)[1]
    assert not (tmp_path / "out").exists()
