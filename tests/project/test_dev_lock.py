"""The project's own environment is locked: requirements-dev.lock covers every requirement in pyproject.toml,
the venv .ci/dev_env.sh made holds exactly the lock, and .ci/newest_releases.py reads the lock right."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest

from repo import REPO_ROOT

LOCK = REPO_ROOT / "requirements-dev.lock"


def _newest_releases():
    spec = importlib.util.spec_from_file_location("newest_releases", REPO_ROOT / ".ci" / "newest_releases.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _requirement_names() -> set[str]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [
        r for extra in ("workload", "test") for r in project["optional-dependencies"][extra]
    ]
    return {re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0] for r in requirements}


def test_the_lock_pins_every_requirement_but_torch_with_hashes():
    nr = _newest_releases()
    locked = nr.locked_versions(LOCK)
    names = {nr.canonical(n) for n in _requirement_names()} - {"torch"}
    assert names <= set(locked), f"not in requirements-dev.lock (run bash .ci/lock_dev.sh): {names - set(locked)}"
    assert "torch" not in locked
    text = LOCK.read_text()
    assert text.count("==") >= len(locked) and all(
        f"\n{name}==" in text.lower() or text.lower().startswith(name) for name in locked
    )
    entries = re.split(r"\n(?=[a-z0-9])", text.split("\n", 2)[2])
    assert all("--hash=sha256:" in entry for entry in entries if "==" in entry)


def test_markers_pick_the_line_for_this_python():
    nr = _newest_releases()
    both = nr.locked_versions(LOCK, (3, 11)), nr.locked_versions(LOCK, (3, 13))
    marked = [line for line in LOCK.read_text().splitlines() if "python_full_version" in line and "==" in line]
    if marked:  # e.g. networkx: one version for < 3.12, another from 3.12
        name = nr.canonical(marked[0].split("==")[0])
        assert both[0][name] != both[1][name]


def test_changed_lists_only_what_differs():
    nr = _newest_releases()
    locked = nr.locked_versions(LOCK)
    newest = dict(locked, transformers="99.0.0", **{"not-locked": "1.0"})
    assert nr.changed(locked, newest) == {"transformers": (locked["transformers"], "99.0.0")}


def test_the_dev_venv_holds_exactly_the_lock():
    marker = Path(sys.prefix) / "envbuild-dev-lock.sha256"
    if not marker.exists():
        pytest.skip("not the venv .ci/dev_env.sh made (CI's phase 1 runs in it)")
    assert marker.read_text().strip() == hashlib.sha256(LOCK.read_bytes()).hexdigest(), (
        "requirements-dev.lock changed since this venv was made: re-run bash .ci/dev_env.sh"
    )
    nr = _newest_releases()
    wrong = {
        name: (version, importlib.metadata.version(name))
        for name, version in nr.locked_versions(LOCK).items()
        if importlib.metadata.version(name) != version
    }
    assert not wrong, wrong
