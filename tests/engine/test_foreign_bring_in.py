"""Bringing the workload's packages into an environment envbuild did not build (builder.engine.foreign.bring_in),
with real pip from a folder of wheels built here: a cache by what it holds, shared by runs that start together."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from builder.engine import foreign
from builder.plan.lock import Entry


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> tuple[Path, Entry]:
    """A folder holding one small pure-Python wheel, and the lock entry that pins it by hash."""
    root = tmp_path_factory.mktemp("bring-in")
    project = root / "project"
    (project / "envbuild_bring_in_probe").mkdir(parents=True)
    (project / "envbuild_bring_in_probe" / "__init__.py").write_text("VALUE = 1\n")
    (project / "pyproject.toml").write_text(
        '[project]\nname = "envbuild-bring-in-probe"\nversion = "1.0"\n'
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    folder = root / "wheels"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(folder),
            str(project),
        ],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = folder.glob("*.whl")
    return folder, Entry("envbuild-bring-in-probe", "1.0", (hashlib.sha256(wheel.read_bytes()).hexdigest(),))


def _probe() -> foreign.Probe:
    return foreign.Probe(
        python="3.11.2",
        machine="x86_64",
        libc=["glibc", "2.36"],
        executable="/usr/bin/python3",
        distributions={},
        torch=None,
    )


def test_runs_that_start_together_share_one_complete_folder(wheels, tmp_path, monkeypatch):
    """Each run pips into its own work folder and moves it into place; one that finds the place taken by a complete
    folder uses that one instead of failing (before, every run but the first ended 'cannot prepare the packages')."""
    folder, entry = wheels
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    got, failed = [], []

    def run():
        try:
            got.append(foreign.bring_in(_probe(), "torch2.13-py3.11", [entry], folder))
        except Exception as exc:  # noqa: BLE001 - the test reports what any run raised
            failed.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == []
    [target] = set(got)
    assert (target / ".complete").is_file() and (target / "envbuild_bring_in_probe" / "__init__.py").is_file()
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no work folder left behind


def test_a_place_taken_by_an_unfinished_folder_is_an_error_not_a_cache_hit(wheels, tmp_path, monkeypatch):
    folder, entry = wheels
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = foreign.bring_in(_probe(), "torch2.13-py3.11", [entry], folder)
    (first / ".complete").unlink()  # not a folder bring_in finished (it moves only complete ones into place)
    (first / "left-over").write_text("x")
    with pytest.raises(foreign.ForeignError, match="cannot prepare the packages"):
        foreign.bring_in(_probe(), "torch2.13-py3.11", [entry], folder)
