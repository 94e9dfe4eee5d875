"""images/common/verify_image.py, the check every image runs at the end of its build.

Two kinds of evidence: this interpreter's real installed packages (CPU torch 2.13 from pip, sentencepiece
from PyPI's binary wheel), which the verify step must accept or reject for the right reasons; and, for the
ROCm branch that needs a ROCm torch, a stand-in `torch` package on PYTHONPATH that reports exactly what the
torch 2.3-2.6 lines report without a visible GPU: `torch.cuda.get_arch_list()` returns [] (it checks
is_available() first) while `torch._C._cuda_getArchFlags()` returns the compiled list. The stand-in only
exercises verify's logic; the real ROCm torch check runs in ROCm image builds (not possible here).
Its torch/lib holds real HIP fat binaries compiled here by Debian 12's hipcc 5.2.3 (no GPU needed) for the
arch check's rule; tests/integration/test_rocm_libs_debian.py runs the same on Debian's ROCm 6.4.
The full step also runs for real at the end of every cpu-cell build (tests/integration/test_build_cpu_cell.py).
"""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from verify_fixtures import rocm_expect, run_verify, stand_in_torch


def _host_expect(**changes) -> dict:
    expect = {
        "cell": "cpu-torch2.13-py3.11",
        "flavor": "cpu",
        "backend": "",
        "backend_version": None,
        "arch": None,
        "torch": {"version": md.version("torch"), "by_path": False},
        "sentencepiece": md.version("sentencepiece"),
        "lock": {"transformers": md.version("transformers"), "peft": md.version("peft")},
    }
    return expect | changes


def _failed(record: dict) -> list[str]:
    return [c["name"] for c in record["checks"] if not c["ok"]]


def test_real_environment_passes_torch_and_lock_and_rejects_a_binary_sentencepiece(tmp_path):
    code, out, record = run_verify(tmp_path, _host_expect())
    assert code == 1 and not record["ok"]
    assert _failed(record) == ["sentencepiece built here"]  # PyPI's manylinux wheel, not built in the image
    assert "manylinux" in out and "verify: ok   torch version" in out


def test_a_wrong_pin_and_an_index_installed_torch_fail_with_what_was_found(tmp_path):
    lock = {"transformers": md.version("transformers"), "peft": "0.0.1"}
    code, out, record = run_verify(
        tmp_path, _host_expect(lock=lock, torch={"version": "2.4.1+rocm6.2", "by_path": True})
    )
    assert code == 1
    assert {"torch version", "torch installed by path", "2 pins of the lock installed"} <= set(_failed(record))
    assert f"peft: pinned 0.0.1, installed {md.version('peft')}" in out
    assert f"expected 2.4.1+rocm6.2; metadata {md.version('torch')}" in out


def test_rocm_branch_reads_the_compiled_arch_list_without_a_gpu(tmp_path):
    stand_in = stand_in_torch(tmp_path / "site")
    code, out, record = run_verify(tmp_path, rocm_expect("gfx90a"), stand_in)
    assert code == 0, out
    assert [c["name"] for c in record["checks"]] == [
        "torch version",
        "torch installed by path",
        "torch.version.hip",
        "compiled for gfx90a",
        "sentencepiece built here",
        "1 pins of the lock installed",
    ]


def test_rocm_branch_fails_on_a_missing_arch_or_another_hip(tmp_path):
    stand_in = stand_in_torch(tmp_path / "site")
    code, out, record = run_verify(tmp_path, rocm_expect("gfx1100"), stand_in)
    assert code == 1 and _failed(record) == ["compiled for gfx1100"]
    assert "compiled for gfx90a, gfx942" in out and "invalid device function" in out

    other = stand_in_torch(tmp_path / "site61", hip="6.1.40093-bd86f1708", flags=None)  # no arch flags at all
    code, out, record = run_verify(tmp_path, rocm_expect("gfx90a"), other)
    assert code == 1 and _failed(record) == ["torch.version.hip", "compiled for gfx90a"]
    assert "expected HIP 6.2.x; found hip=6.1.40093-bd86f1708" in out and "no GPU arch" in out


def test_anything_installed_outside_the_lock_fails_unless_torch_requires_it(tmp_path):
    """ "complete": every distribution is locked, is torch, or is a requirement of torch (its index's package,
    e.g. pytorch-triton-rocm), which verify.json lists as unlocked; anything else fails the build."""
    others = (("filelock", "3.16.1"), ("pytorch-triton-rocm", "3.0.0"), ("requests", "2.32.3"))
    site = stand_in_torch(
        tmp_path / "site",
        others=others,
        torch_requires=(
            "filelock",
            "pytorch-triton-rocm==3.0.0; platform_system == 'Linux'",
            "opt-einsum>=3.3; extra == 'opt-einsum'",
        ),
    )
    expect = rocm_expect() | {"arch": None, "complete": True, "lock": {"sentencepiece": "0.2.0", "filelock": "3.16.1"}}
    code, out, record = run_verify(tmp_path, expect, site, isolated=True)
    assert code == 1 and _failed(record) == ["every installed distribution is locked"]
    assert "not in the lock and not a requirement of torch: requests==2.32.3" in out
    assert record["unlocked"] == ["pytorch-triton-rocm==3.0.0"]

    shutil.rmtree(site / "requests-2.32.3.dist-info")
    code, out, record = run_verify(tmp_path, expect, site, isolated=True)
    assert code == 0, out
    assert record["unlocked"] == ["pytorch-triton-rocm==3.0.0"]


SDK = (("rocm", "7.14.0"), ("rocm-sdk-core", "7.14.0"), ("rocm-sdk-libraries", "7.14.0"))


def _pip_rocm(tmp_path: Path, devices: tuple[str, ...]) -> tuple[Path, dict]:
    """A pip-ROCm image's site: torch asking for rocm[libraries,device-all] (as PyTorch's 7.14 wheels do), the SDK
    wheels and the given device packages; expect.json as envbuild renders it for gfx942."""
    site = stand_in_torch(
        tmp_path / "site",
        others=SDK + tuple((d, "7.14.0") for d in devices),
        torch_requires=("rocm[libraries,device-all]==7.14",),
    )
    expect = rocm_expect("gfx942") | {
        "backend_version": None,
        "complete": True,
        "accel_wheels": {
            "packages": ["rocm", "rocm-sdk-core", "rocm-sdk-libraries", "rocm-sdk-device-gfx942"],
            "device_packages": ["rocm-sdk-device-gfx942"],
            "device_prefixes": ["rocm-sdk-device-"],
        },
    }
    return site, expect


def test_pip_rocm_image_has_its_archs_sdk_wheels_and_no_other_archs_device_code(tmp_path):
    """The pip-ROCm route: the SDK wheels of the cell's arch are installed and allowed beside the lock; another arch's
    device package (what device-all would bring) fails the build, and so does a missing one."""
    site, expect = _pip_rocm(tmp_path / "one", ("rocm-sdk-device-gfx942",))
    code, out, record = run_verify(tmp_path / "one", expect, site, isolated=True)
    assert code == 0, out
    assert "verify: ok   only rocm-sdk-device-gfx942 of the per-arch device packages" in out
    assert record["unlocked"] == [
        "rocm==7.14.0",
        "rocm-sdk-core==7.14.0",
        "rocm-sdk-device-gfx942==7.14.0",
        "rocm-sdk-libraries==7.14.0",
    ]

    site, expect = _pip_rocm(tmp_path / "all", ("rocm-sdk-device-gfx942", "rocm-sdk-device-gfx950"))
    code, out, record = run_verify(tmp_path / "all", expect, site, isolated=True)
    assert code == 1 and _failed(record) == [
        "only rocm-sdk-device-gfx942 of the per-arch device packages",
        "every installed distribution is locked",
    ]
    assert "device code of other archs is installed (device-all?): rocm-sdk-device-gfx950==7.14.0" in out

    site, expect = _pip_rocm(tmp_path / "none", ())
    code, out, record = run_verify(tmp_path / "none", expect, site, isolated=True)
    assert code == 1 and _failed(record) == ["4 accelerator wheels installed"]
    assert "missing: rocm-sdk-device-gfx942" in out


def test_a_wheel_whose_compile_needs_a_gpu_is_a_note_on_a_host_without_one(tmp_path):
    """torch 2.13.0+rocm7.2 (pytorch/pytorch#189194): the build host has no GPU, so the verify step records that
    torch.compile is not exercised there and passes; nothing tries to compile."""
    reason = "torch 2.13.0+rocm7.2: torch.compile on the CPU with no GPU raises (pytorch/pytorch#189194)"
    site = stand_in_torch(tmp_path / "site")
    code, out, record = run_verify(tmp_path, rocm_expect() | {"compile_needs_gpu": reason}, site)
    assert code == 0, out
    assert record["notes"] == [f"torch.compile not exercised on this host (no GPU): {reason}"]
    assert f"verify: note torch.compile not exercised on this host (no GPU): {reason}" in out


KERNEL = """#include <hip/hip_runtime.h>
__global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
"""


def _hipcc_library(out: Path, archs: list[str], needs: list[Path] = ()) -> Path:
    """A real HIP fat binary (shared library) for `archs`, compiled here with no GPU by Debian 12's hipcc 5.2.3
    (HIP_PLATFORM=amd), whose DT_NEEDED names `needs`."""
    if shutil.which("hipcc") is None:
        if os.environ.get("CI"):
            pytest.fail("hipcc is missing: .ci/run installs it (apt-get install hipcc)", pytrace=False)
        pytest.skip("needs hipcc (apt-get install hipcc)")
    source = out.parent / "k.hip"
    source.write_text(KERNEL)
    links = [arg for lib in needs for arg in (f"-L{lib.parent}", f"-l:{lib.name}")]
    proc = subprocess.run(
        ["hipcc", "-shared", "-fPIC", *(f"--offload-arch={a}" for a in archs), "-o", str(out), str(source), *links],
        env={**os.environ, "HIP_PLATFORM": "amd"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return out


def _rocm_torch(tmp_path: Path, torch_loads_it: bool) -> Path:
    """The stand-in torch, its torch/lib holding libtorch_hip.so (gfx90a) and libhipsparselt.so.0, which targets
    only other GPUs (gfx940 and gfx1030; the real hipSPARSELt ships gfx942/gfx950 only, which this hipcc's
    clang 15 cannot target). libtorch_hip.so names it in DT_NEEDED only when `torch_loads_it`."""
    site = stand_in_torch(tmp_path / "site")
    torch_lib = site / "torch" / "lib"
    torch_lib.mkdir()
    other = _hipcc_library(torch_lib / "libhipsparselt.so.0", ["gfx940", "gfx1030"])
    _hipcc_library(torch_lib / "libtorch_hip.so", ["gfx90a"], [other] if torch_loads_it else [])
    return site


def test_a_library_torch_does_not_load_that_lacks_the_arch_is_a_note(tmp_path):
    """A library in torch/lib that targets other GPUs, loaded by nothing torch loads,
    leaves the build passing and is named in verify.json's notes."""
    site = _rocm_torch(tmp_path, torch_loads_it=False)
    torch_lib = site / "torch" / "lib"
    code, out, record = run_verify(tmp_path, rocm_expect("gfx90a"), site)
    assert code == 0, out
    assert "code objects for gfx90a in what torch loads" in [c["name"] for c in record["checks"] if c["ok"]]
    note = f"gfx90a is missing in {torch_lib / 'libhipsparselt.so.0'}, which torch does not load"
    assert record["notes"] == [note] and f"verify: note {note}" in out
    coverage = record["arch_coverage"]
    assert coverage["verdict"] == "present" and coverage["missing_in"] == []
    assert [b["path"] for b in coverage["binaries"]] == [str(torch_lib / "libtorch_hip.so")]
    assert coverage["not_loaded"]["archs"] == ["gfx1030", "gfx940"]


def test_a_library_torch_loads_that_lacks_the_arch_fails_the_build(tmp_path):
    site = _rocm_torch(tmp_path, torch_loads_it=True)
    torch_lib = site / "torch" / "lib"
    code, out, record = run_verify(tmp_path, rocm_expect("gfx90a"), site)
    assert code == 1 and _failed(record) == ["code objects for gfx90a in what torch loads"]
    assert f"missing in {torch_lib / 'libhipsparselt.so.0'} (loaded by torch)" in out
    assert record["notes"] == [] and record["arch_coverage"]["not_loaded"]["binaries"] == []
    assert record["arch_coverage"]["archs"] == ["gfx1030", "gfx90a", "gfx940"]


def test_torch_compiles_backend_must_be_installed_at_its_pin_and_import(tmp_path):
    """A source cell with a verified Triton pin (expect.json "compile_package"): verify checks the installed
    version and imports the module; the package counts as torch's (unlocked), though the source-built torch's
    own metadata does not require it."""
    site = stand_in_torch(tmp_path / "site", others=(("pytorch-triton-rocm", "3.0.0"),))
    (site / "triton").mkdir()
    (site / "triton" / "__init__.py").write_text("__version__ = '3.0.0'\n")
    package = {"name": "pytorch-triton-rocm", "version": "3.0.0", "import": "triton"}
    expect = rocm_expect() | {"arch": None, "complete": True, "compile_package": package}
    code, out, record = run_verify(tmp_path, expect, site, isolated=True)
    assert code == 0, out
    assert "pytorch-triton-rocm==3.0.0 for torch.compile" in [c["name"] for c in record["checks"] if c["ok"]]
    assert record["unlocked"] == ["pytorch-triton-rocm==3.0.0"]

    code, out, record = run_verify(
        tmp_path, expect | {"compile_package": package | {"version": "3.1.0"}}, site, isolated=True
    )
    assert code == 1 and _failed(record) == ["pytorch-triton-rocm==3.1.0 for torch.compile"]
    assert "expected pytorch-triton-rocm 3.1.0; found 3.0.0" in out

    code, out, record = run_verify(tmp_path, expect | {"compile_package": None}, site, isolated=True)
    assert code == 1 and _failed(record) == ["every installed distribution is locked"]  # not torch's requirement

    (site / "triton" / "__init__.py").write_text("raise ImportError('libtriton.so: cannot open shared object file')\n")
    code, out, record = run_verify(tmp_path, expect, site, isolated=True)
    assert code == 1 and _failed(record) == ["pytorch-triton-rocm==3.0.0 for torch.compile"]
    assert "import triton failed: ImportError: libtriton.so: cannot open shared object file" in out
