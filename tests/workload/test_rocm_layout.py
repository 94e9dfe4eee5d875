"""Finding a ROCm userspace laid out the ROCm 10 way (/opt/rocm/core-<version>, /opt/rocm/extras-<major>) or the legacy
way (/opt/rocm -> /opt/rocm-<version>), in trees built under tmp_path (the real libraries: tests/integration)."""

from __future__ import annotations

import os
from pathlib import Path

from workload.binaries import rocm_layout
from workload.binaries.code_object_reader import library_dirs


def _prefix(root: Path, path: str, version: str | None = None, tools: tuple[str, ...] = ()) -> Path:
    prefix = root / path.lstrip("/")
    (prefix / "lib").mkdir(parents=True)
    if version is not None:
        (prefix / ".info").mkdir()
        (prefix / ".info" / "version").write_text(version + "\n")
    for name in tools:
        (prefix / "bin").mkdir(exist_ok=True)
        (prefix / "bin" / name).write_text("#!/bin/sh\n")
        (prefix / "bin" / name).chmod(0o755)
    return prefix


def test_a_rocm_10_tree_is_found_under_core_and_its_extras(tmp_path):
    """ROCm 10.1 as its packages install it: /opt/rocm/core-10.1 with /opt/rocm/lib and /opt/rocm/bin symlinks into
    it (the amdrocm meta package), /opt/rocm/extras-10/lib beside it. Each real directory is listed once."""
    core = _prefix(tmp_path, "/opt/rocm/core-10.1", "10.1.0", tools=("rocminfo",))
    (tmp_path / "opt/rocm/lib").symlink_to(core / "lib")
    (tmp_path / "opt/rocm/bin").symlink_to(core / "bin")
    (tmp_path / "opt/rocm/extras-10/lib").mkdir(parents=True)
    found = rocm_layout.installs(tmp_path, env={})
    assert [(i.prefix, i.layout, i.version) for i in found] == [(core, "core", "10.1.0")]
    assert rocm_layout.library_dirs(tmp_path, env={}) == [core / "lib", tmp_path / "opt/rocm/extras-10/lib"]
    assert rocm_layout.tool("rocminfo", tmp_path, env={}) == core / "bin" / "rocminfo"
    assert rocm_layout.tool("amd-smi", tmp_path, env={}) is None


def test_a_tarball_install_without_symlinks_and_two_core_versions_newest_first(tmp_path):
    """A tarball leaves no /opt/rocm/lib: the core prefixes are still found, newest first; a core dir without
    .info/version takes its version from its name; an empty directory is no prefix."""
    old = _prefix(tmp_path, "/opt/rocm/core-10.0")
    new = _prefix(tmp_path, "/opt/rocm/core-10.1", "10.1.0")
    (tmp_path / "opt/rocm/core-9.9").mkdir()  # neither lib/ nor bin/
    found = rocm_layout.installs(tmp_path, env={})
    assert [(i.prefix, i.version) for i in found] == [(new, "10.1.0"), (old, "10.0")]
    assert rocm_layout.library_dirs(tmp_path, env={}) == [new / "lib", old / "lib"]


def test_the_legacy_layout_and_rocm_path_are_found_too(tmp_path):
    legacy = _prefix(tmp_path, "/opt/rocm-6.4.3", "6.4.3-121")
    (tmp_path / "opt/rocm").symlink_to(legacy)
    assert [(i.prefix, i.layout, i.version) for i in rocm_layout.installs(tmp_path, env={})] == [
        (tmp_path / "opt/rocm", "legacy", "6.4.3-121")
    ]
    tarball = _prefix(tmp_path, "/home/me/rocm-sdk", "10.1.0")
    found = rocm_layout.installs(tmp_path, env={"ROCM_PATH": "/home/me/rocm-sdk"})
    assert [i.prefix for i in found] == [tarball, tmp_path / "opt/rocm"]
    assert rocm_layout.installs(tmp_path, env={"ROCM_PATH": "relative/path"})[0].prefix == tmp_path / "opt/rocm"


def test_a_version_file_that_is_no_version_is_not_taken(tmp_path):
    prefix = _prefix(tmp_path, "/opt/rocm/core-10.1")
    (prefix / ".info").mkdir()
    (prefix / ".info" / "version").write_text("<script>" + "x" * 10_000)
    assert rocm_layout.installs(tmp_path, env={})[0].version == "10.1"


def test_the_arch_checks_read_the_core_lib_dir(tmp_path, monkeypatch):
    """code_object_reader.library_dirs (the arch probe, the verify step, `envbuild inspect IMAGE`) lists the 10.x
    lib dir beside torch/lib; with no ROCm prefix at all it lists none."""
    core = _prefix(tmp_path, "/opt/rocm/core-10.1", "10.1.0")
    monkeypatch.delenv("ROCM_PATH", raising=False)
    assert library_dirs(tmp_path)[1] == [core / "lib"]
    assert library_dirs(tmp_path / "empty")[1] == []
    assert os.path.isdir(library_dirs()[0]) or str(library_dirs()[0]) == "/nonexistent"
