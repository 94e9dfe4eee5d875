"""The project's own environment is locked: requirements-dev.lock covers every requirement in pyproject.toml,
the venv .ci/dev_env.sh made holds exactly the lock, and .ci/newest_releases.py reads the lock right."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from repo import REPO_ROOT

LOCK = REPO_ROOT / "requirements-dev.lock"
TORCH_LOCK = REPO_ROOT / "requirements-dev-torch.lock"
INSTALL_TORCH = REPO_ROOT / ".ci" / "install_dev_torch.sh"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


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
    assert marker.read_text().split() == [hashlib.sha256(p.read_bytes()).hexdigest() for p in (LOCK, TORCH_LOCK)], (
        "requirements-dev.lock or requirements-dev-torch.lock changed since this venv was made: re-run bash .ci/dev_env.sh"
    )
    assert importlib.metadata.version("torch") == _torch_lock()[1], "the venv's torch is not the torch lock's"
    nr = _newest_releases()
    wrong = {
        name: (version, importlib.metadata.version(name))
        for name, version in nr.locked_versions(LOCK).items()
        if importlib.metadata.version(name) != version
    }
    assert not wrong, wrong


def _torch_lock() -> tuple[str, str, list[str]]:
    """(index URL, the pinned version, the sha256 list) of requirements-dev-torch.lock."""
    text = TORCH_LOCK.read_text()
    index = re.search(r"^--index-url (\S+)$", text, re.M).group(1)
    version = re.search(r"^torch==(\S+) \\$", text, re.M).group(1)
    return index, version, re.findall(r"--hash=sha256:([0-9a-f]{64})", text)


def _lock_dev_torch():
    spec = importlib.util.spec_from_file_location("lock_dev_torch", REPO_ROOT / ".ci" / "lock_dev_torch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_torch_lock_names_the_cpu_index_and_pins_every_recorded_wheel_by_hash():
    """torch is pinned by hash, not by version: one sha256 per CPU wheel recipes/wheel-hashes.toml records (CPython
    3.11-3.14, x86_64 and aarch64), from the CPU index the lock names; the file is what lock_dev_torch.py writes."""
    index, version, hashes = _torch_lock()
    assert index == CPU_INDEX and version == "2.13.0+cpu"
    recorded = tomllib.loads((REPO_ROOT / "recipes" / "wheel-hashes.toml").read_text())["wheel"]
    cpu = {name: digest for name, digest in recorded.items() if name.startswith("torch-2.13.0+cpu-")}
    assert sorted(hashes) == sorted(cpu.values()) and len(hashes) == 8
    for python in ("cp311", "cp312", "cp313", "cp314"):
        for machine in ("x86_64", "aarch64"):
            assert f"torch-2.13.0+cpu-{python}-{python}-manylinux_2_28_{machine}.whl" in cpu
    module = _lock_dev_torch()
    assert TORCH_LOCK.read_text() == module.render("2.13.0", module.cpu_wheels("2.13.0"))


def test_the_recorded_cp311_hash_is_the_file_ci_installs():
    """The one hash checked here: the CPU wheel this project's machines hold is the file the lock pins."""
    wheel = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    if not wheel.is_file():
        pytest.skip("no local CPU wheel on this machine")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert digest == "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b" and digest in _torch_lock()[2]


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> Path:
    """A venv with no torch whose `python -m pip` is this venv's pip (a path line to a folder holding only pip:
    ensurepip takes seconds)."""
    tmp = tmp_path_factory.mktemp("torch-lock")
    venv.create(tmp / "venv", with_pip=False)
    (tmp / "pip-only").mkdir()
    (tmp / "pip-only" / "pip").symlink_to(Path(importlib.util.find_spec("pip").origin).parent)
    purelib = next((tmp / "venv" / "lib").glob("python3*/site-packages"))
    (purelib / "pip-only.pth").write_text(str(tmp / "pip-only") + "\n")
    return tmp / "venv" / "bin" / "python"


def _install_torch(python: Path, tmp_path: Path, *, hidden: bool, **env: str) -> subprocess.CompletedProcess:
    """install_dev_torch.sh as a dry run (pip resolves, fetches and hash-checks the wheel, installs nothing), with
    pip's retries off; `hidden`: no pip configuration and no find-links (the machine's local wheel folder unseen)."""
    environment = {**os.environ, "PIP_DRY_RUN": "1", "PIP_RETRIES": "0", "PIP_DISABLE_PIP_VERSION_CHECK": "1", **env}
    if hidden:
        environment.update(PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS=env.get("PIP_FIND_LINKS", ""))
    return subprocess.run(
        ["bash", str(INSTALL_TORCH), str(python)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=environment,
    )


def test_without_the_local_wheel_the_error_names_the_cpu_index(fresh_venv, tmp_path):
    proc = _install_torch(fresh_venv, tmp_path, hidden=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"torch comes from PyTorch's CPU index, {CPU_INDEX}" in proc.stderr


def test_a_wheel_whose_sha256_the_lock_lacks_is_refused(fresh_venv, tmp_path):
    """A folder that offers a torch wheel of the pinned name but other bytes: pip's hash check refuses it."""
    tag = subprocess.run(
        [
            str(fresh_venv),
            "-c",
            "import platform,sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}', platform.machine())",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    folder = tmp_path / "wheels"
    folder.mkdir()
    with zipfile.ZipFile(folder / f"torch-2.13.0+cpu-{tag[0]}-{tag[0]}-manylinux_2_28_{tag[1]}.whl", "w") as wheel:
        wheel.writestr("torch/__init__.py", "# not torch\n")
    proc = _install_torch(fresh_venv, tmp_path, hidden=True, PIP_FIND_LINKS=str(folder))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "DO NOT MATCH THE HASHES" in proc.stderr and "refused a torch wheel whose sha256" in proc.stderr


def test_the_local_wheel_passes_the_hash_check(fresh_venv, tmp_path):
    if not Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").is_file():
        pytest.skip("no local CPU wheel on this machine")
    proc = _install_torch(fresh_venv, tmp_path, hidden=True, PIP_FIND_LINKS="/opt/wheels")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "torch not installed (pip --dry-run) from requirements-dev-torch.lock (hash-checked)" in proc.stdout


def test_a_python_the_lock_has_no_wheel_for_is_told_which_it_has(tmp_path):
    """Other Pythons need other wheels: one the lock lacks (here a stand-in reporting CPython 3.10) stops before pip
    with the Pythons and machines the lock has."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho cp310-cp310-manylinux_2_28_x86_64\n")
    python.chmod(0o755)
    proc = _install_torch(python, tmp_path, hidden=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no torch wheel for this Python and machine (cp310-cp310-manylinux_2_28_x86_64)" in proc.stderr
    assert "cp311 x86_64" in proc.stderr and "cp314 aarch64" in proc.stderr and CPU_INDEX in proc.stderr
