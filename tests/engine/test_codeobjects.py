"""GPU code-object coverage, checked on a real HIP fat binary compiled here with no GPU.

Debian 12's hipcc (ROCm 5.2.3, apt) with HIP_PLATFORM=amd compiles a small kernel for gfx90a and gfx908;
`clang-offload-bundler --list` (llvm-15) is the independent reference for what the binary holds. .ci/run
installs both; elsewhere these tests skip without them (and fail under CI=true).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from workload.binaries.code_object_reader import BUNDLE_MAGIC, coverage, scan_binary, target_arch

KERNEL = """#include <hip/hip_runtime.h>
__global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
int main() { return 0; }
"""
BUNDLER = Path("/usr/lib/llvm-15/bin/clang-offload-bundler")


def _require(tool: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{tool} is missing: .ci/run installs it (apt-get install hipcc llvm-15)", pytrace=False)
    pytest.skip(f"needs {tool} (apt-get install hipcc llvm-15)")


@pytest.fixture(scope="module")
def fat_binary(tmp_path_factory) -> Path:
    if shutil.which("hipcc") is None:
        _require("hipcc")
    work = tmp_path_factory.mktemp("hip")
    (work / "k.hip").write_text(KERNEL)
    proc = subprocess.run(
        ["hipcc", "--offload-arch=gfx90a", "--offload-arch=gfx908", "-o", str(work / "k"), str(work / "k.hip")],
        env={**os.environ, "HIP_PLATFORM": "amd"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return work / "k"


def test_both_compiled_archs_are_found_and_gfx942_is_missing(fat_binary):
    cov = coverage([fat_binary], "gfx942")
    assert cov.archs == ["gfx908", "gfx90a"]
    assert cov.verdict == "missing" and cov.missing_in() == [str(fat_binary)]
    assert coverage([fat_binary], "gfx90a").verdict == "present"
    assert coverage([fat_binary], "gfx908").verdict == "present"


def test_scan_agrees_with_clang_offload_bundler(fat_binary, tmp_path):
    if not BUNDLER.exists():
        _require("clang-offload-bundler")
    section = tmp_path / "fatbin"
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.hip_fatbin", str(fat_binary), str(section)], check=True)
    listed = subprocess.run(
        [str(BUNDLER), "--list", "--type=o", f"--input={section}"], check=True, capture_output=True, text=True
    ).stdout.split()
    gpu = sorted(t.rsplit("-", 1)[-1] for t in listed if "amdgcn" in t)
    assert scan_binary(fat_binary).targets == gpu == ["gfx908", "gfx90a"]


def test_inspect_command_names_the_missing_arch_and_exits_1(fat_binary):
    missing = CliRunner().invoke(main, ["inspect", str(fat_binary), "--arch", "gfx942"])
    assert missing.exit_code == 1
    assert "gfx942: MISSING" in missing.output and "invalid device function" in missing.output
    present = CliRunner().invoke(main, ["inspect", str(fat_binary), "--arch", "gfx90a", "--json"])
    assert present.exit_code == 0, present.output
    record = json.loads(present.output)
    assert record["verdict"] == "present" and record["archs"] == ["gfx908", "gfx90a"]


NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}  # an engine that cannot answer


@pytest.mark.parametrize("target", ["{tmp}/nope", "/nonexistent/libfoo.so", "./libfoo.so", "NOT A REF"])
def test_inspect_of_something_that_is_neither_a_path_nor_an_image_is_bad_input(tmp_path, monkeypatch, target):
    """Decided before any engine is asked: the same exit 2 whether or not an engine answers."""
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE["DOCKER_HOST"])
    result = CliRunner().invoke(main, ["inspect", target.format(tmp=tmp_path), "--arch", "gfx90a"])
    assert result.exit_code == 2, result.output
    assert "no such file or directory, and not an image reference either" in result.output
    assert "Docker" not in result.output


def test_inspect_of_an_image_reference_with_no_engine_says_the_engine_is_missing(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE["DOCKER_HOST"])
    result = CliRunner().invoke(main, ["inspect", "envbuild-test/absent:1", "--arch", "gfx90a"])
    assert result.exit_code == 2, result.output
    assert "no Docker engine answers at unix:///nonexistent/docker.sock" in result.output


@pytest.mark.docker
def test_inspect_of_an_image_the_engine_lacks_is_bad_input(docker_engine):
    result = CliRunner().invoke(main, ["inspect", "envbuild-test/absent-image:1", "--arch", "gfx90a"])
    assert result.exit_code == 2, result.output
    assert "neither a path here nor a local image" in result.output


def test_kernel_library_dirs_count_files_per_arch(fat_binary, tmp_path):
    library = tmp_path / "lib" / "rocblas" / "library"
    library.mkdir(parents=True)
    for name in ("TensileLibrary_lazy_gfx90a.dat", "Kernels.so-000-gfx90a-xnack-.hsaco", "TensileLibrary_gfx908.co"):
        (library / name).write_bytes(b"")
    shutil.copy(fat_binary, tmp_path / "lib" / "libfake_hip.so")
    cov = coverage([tmp_path / "lib"], "gfx90a")
    assert cov.library_files == {str(library): {"gfx908": 1, "gfx90a": 2}}
    assert cov.verdict == "present"
    assert coverage([tmp_path / "lib"], "gfx942").missing_in() == [
        str(tmp_path / "lib" / "libfake_hip.so"),
        str(library),
    ]


def test_a_stray_magic_string_with_no_valid_header_is_not_a_bundle(tmp_path):
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"\0" * 64 + BUNDLE_MAGIC + struct.pack("<Q", 10**9) + b"\0" * 64)
    assert scan_binary(junk).bundles == 0
    assert coverage([junk], "gfx90a").verdict == "unknown"


def test_target_ids_reduce_to_base_archs():
    assert target_arch("hipv4-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-") == "gfx90a"
    assert target_arch("hip-amdgcn-amd-amdhsa-gfx1100") == "gfx1100"
    assert target_arch("host-x86_64-unknown-linux") is None


def test_probe_fails_when_the_device_arch_has_no_code_objects(fat_binary, tmp_path, monkeypatch):
    """The arch_code_objects probe on a (simulated) ROCm GPU whose arch is gfx942, with the torch library dir
    holding the real fat binary (gfx90a + gfx908): the probe names the arch and the file that lacks it."""
    import types

    import torch

    import workload.probes.code_object_probe as probe
    from workload.probes import run_probes

    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(fat_binary, lib / "libtorch_hip.so")
    monkeypatch.setattr(torch.version, "hip", "6.2.41133-dd7f95766", raising=False)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(gcnArchName="gfx942:sramecc+:xnack-")
    )
    monkeypatch.setattr(torch._C, "_cuda_getArchFlags", lambda: "gfx90a gfx908", raising=False)
    monkeypatch.setattr(probe, "library_dirs", lambda: (lib, []))
    record = probe.arch_code_objects(types.SimpleNamespace(on_gpu=True, device=torch.device("cuda", 0)))
    assert record["status"] == "fail"
    assert record["values"]["arch"] == "gfx942" and record["values"]["code_object_archs"] == ["gfx908", "gfx90a"]
    assert f"no gfx942 code objects in {lib / 'libtorch_hip.so'}" in record["message"]
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(gcnArchName="gfx90a:sramecc+:xnack-")
    )
    assert (
        probe.arch_code_objects(types.SimpleNamespace(on_gpu=True, device=torch.device("cuda", 0)))["status"] == "pass"
    )
    monkeypatch.undo()
    assert run_probes("cpu", only=["arch_code_objects"])[0]["status"] == "skip"


def test_dt_needed_of_this_python_agrees_with_readelf_and_broken_files_read_as_none(tmp_path):
    """workload.binaries.elf_needed on an ELF every machine has, then on a truncated copy and on junk: no exception."""
    import re
    import sys

    from workload.binaries.elf_needed import needed

    python = Path(sys.executable).resolve()
    dynamic = subprocess.run(["readelf", "-d", str(python)], check=True, capture_output=True, text=True).stdout
    assert needed(python) == re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic) != []
    data = python.read_bytes()
    for name, content in {
        "truncated": data[:4096],
        "header only": data[:64],
        "junk": b"\x7fELF" + b"\xff" * 60,
    }.items():
        (tmp_path / name).write_bytes(content)
        assert needed(tmp_path / name) == [], name
