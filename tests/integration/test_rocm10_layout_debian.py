"""The arch check, the arch probe and `envbuild inspect` on real ROCm libraries laid out the ROCm 10 way.

Debian sid's ROCm 6.4 libraries (`bash .ci/debian_rocm_libs.sh`, the same cache as test_rocm_libs_debian.py) are
placed, hard-linked, in /opt/rocm/core-10.1/lib of a tree under tmp_path (ROCm 10.1 installs there: AMD's transition
guide, ROCm/rocm-docs docs/about/transition-guide-TheRock.md@9bcf25d) with no /opt/rocm/lib, as a tarball install
leaves it. What the libraries carry (gfx90a and gfx1030 yes, gfx942 no) is read off the files in
test_rocm_libs_debian.py; here the question is only whether every check finds them under core-10.1.
"""

from __future__ import annotations

import json
import os
import shutil
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from tests.integration.test_rocm_libs_debian import _fake_torch, _link_or_copy, lib  # noqa: F401 (fixture)
from verify_fixtures import rocm_expect, run_verify, stand_in_torch
from workload.binaries import rocm_layout
from workload.binaries.code_object_reader import loaded_split


@pytest.fixture(scope="module")
def rocm10(lib, tmp_path_factory) -> Path:  # noqa: F811 (the imported fixture)
    """A root whose /opt/rocm/core-10.1/lib holds Debian's ROCm libraries (hard links) and whose .info/version
    says 10.1.0; /opt/rocm has no lib/ of its own."""
    root = tmp_path_factory.mktemp("rocm10-root")
    core = root / "opt" / "rocm" / "core-10.1"
    shutil.copytree(lib, core / "lib", symlinks=True, copy_function=_link_or_copy)
    (core / ".info").mkdir()
    (core / ".info" / "version").write_text("10.1.0\n")
    return root


def _core_lib(root: Path) -> Path:
    return root / "opt" / "rocm" / "core-10.1" / "lib"


def test_the_rocm_10_tree_is_found_and_its_libraries_checked(rocm10, tmp_path):
    """rocm_layout finds core-10.1 (the version from .info/version); what a torch loading hipRAND and rocBLAS loads
    from there carries gfx90a and lacks gfx942, the kernel dir of rocBLAS under core-10.1 included."""
    [install] = rocm_layout.installs(rocm10, env={})
    assert (install.prefix.name, install.layout, install.version) == ("core-10.1", "core", "10.1.0")
    dirs = rocm_layout.library_dirs(rocm10, env={})
    assert dirs == [_core_lib(rocm10)]
    torch_lib = _fake_torch(tmp_path, _core_lib(rocm10), "librocblas.so.4", "libhiprand.so.1")
    loaded, _ = loaded_split(torch_lib, dirs, "gfx90a")
    assert sorted(Path(b.path).name for b in loaded.binaries) == ["librocblas.so.4.4", "librocrand.so.1.1"]
    assert loaded.verdict == "present"
    assert all(d.startswith(str(_core_lib(rocm10))) for d in loaded.library_files)
    missing, _ = loaded_split(torch_lib, dirs, "gfx942")
    assert missing.verdict == "missing" and str(_core_lib(rocm10) / "librocblas.so.4.4") in missing.missing_in()


def test_the_arch_probe_passes_on_the_rocm_10_tree(rocm10, tmp_path, monkeypatch):
    """The workload's arch probe on a simulated gfx90a GPU, with the lib dirs rocm_layout finds in the 10.x tree: it
    passes, and on gfx942 it fails naming the libraries under core-10.1."""
    import torch

    import workload.probes.code_object_probe as probe

    torch_lib = _fake_torch(tmp_path, _core_lib(rocm10), "librocblas.so.4", "libhiprand.so.1")
    monkeypatch.setattr(probe, "library_dirs", lambda: (torch_lib, rocm_layout.library_dirs(rocm10, env={})))
    monkeypatch.setattr(torch.version, "hip", "10.1.0", raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getArchFlags", lambda: "gfx90a gfx942", raising=False)
    for arch, status in (("gfx90a", "pass"), ("gfx942", "fail")):
        monkeypatch.setattr(
            torch.cuda, "get_device_properties", lambda i, a=arch: types.SimpleNamespace(gcnArchName=f"{a}:xnack-")
        )
        record = probe.arch_code_objects(types.SimpleNamespace(on_gpu=True, device=torch.device("cuda", 0)))
        assert record["status"] == status, record["message"]
    assert str(_core_lib(rocm10) / "librocblas.so.4.4") in record["values"]["missing_in"]


def test_the_image_verify_step_finds_the_libraries_torch_loads_under_rocm_path(rocm10, tmp_path):
    """The verify step as an image runs it, with ROCM_PATH at the 10.x prefix (what a tarball install sets, AMD's
    guide): the rocRAND torch loads through hipRAND is read under core-10.1 and carries gfx1030."""
    site = stand_in_torch(tmp_path / "site", flags="gfx1030 gfx90a")
    _fake_torch(site, _core_lib(rocm10), "libhiprand.so.1")
    core = _core_lib(rocm10).parent
    code, out, record = run_verify(tmp_path, rocm_expect("gfx1030"), site, env={"ROCM_PATH": str(core)})
    assert code == 0, out
    coverage = record["arch_coverage"]
    assert coverage["verdict"] == "present"
    assert [b["path"] for b in coverage["binaries"]] == [str(_core_lib(rocm10) / "librocrand.so.1.1")]
    (tmp_path / "b").mkdir()
    code, out, record = run_verify(tmp_path / "b", rocm_expect("gfx942"), site, env={"ROCM_PATH": str(core)})
    assert code == 1 and str(_core_lib(rocm10) / "librocrand.so.1.1") in record["arch_coverage"]["missing_in"]


def test_inspect_reads_the_core_lib_dir(rocm10):
    result = CliRunner().invoke(main, ["inspect", str(_core_lib(rocm10)), "--arch", "gfx90a", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["verdict"] == "present"
    assert os.path.isdir(_core_lib(rocm10) / "rocblas")


IMAGE_DOCKERFILE = """\
FROM {base}
RUN ln -s /usr/bin/python3 /usr/local/bin/python
COPY workload/ /opt/envbuild/workload/
COPY torch/ /opt/envbuild/torch/
COPY rocm/ /opt/rocm/core-10.1/lib/
COPY info/ /opt/rocm/core-10.1/.info/
"""


@pytest.fixture(scope="module")
def rocm10_image(lib, tools_image, tmp_path_factory) -> str:  # noqa: F811 (the imported fixture)
    """tools_image + this checkout's workload + a 'torch' whose libtorch_hip.so loads hipRAND (so rocRAND), and in
    /opt/rocm/core-10.1/lib (no /opt/rocm/lib: a tarball's layout) Debian's hipRAND, rocRAND, HIP runtime, rocFFT
    (loaded by nothing) and hipBLASLt's gfx908 kernel files (which lack gfx1030)."""
    from builder.engine.build import BuildOptions, build_image
    from builder.plan.render import read_manifest
    from repo import REPO_ROOT

    ctx = tmp_path_factory.mktemp("rocm10-image")
    shutil.copytree(REPO_ROOT / "workload", ctx / "workload", ignore=shutil.ignore_patterns("__pycache__"))
    rocm = ctx / "rocm"
    (rocm / "hipblaslt" / "library").mkdir(parents=True)
    for name in ("libhiprand.so.1.1", "librocrand.so.1.1", "libamdhip64.so.6.4.43484", "librocfft.so.0.1"):
        shutil.copy(lib / name, rocm / name)
    for soname in ("libhiprand.so.1", "librocrand.so.1", "libamdhip64.so.6", "librocfft.so.0"):
        os.symlink(os.readlink(lib / soname), rocm / soname)
    for kernel in (lib / "hipblaslt" / "library").glob("*gfx908*"):
        shutil.copy(kernel, rocm / "hipblaslt" / "library" / kernel.name)
    (ctx / "info").mkdir()
    (ctx / "info" / "version").write_text("10.1.0\n")
    torch_lib = _fake_torch(ctx, lib, "libhiprand.so.1")
    (torch_lib.parent / "__init__.py").write_text("")
    (ctx / "Dockerfile").write_text(IMAGE_DOCKERFILE.format(base=tools_image))
    tag = "envbuild-test/rocm10-layout-inspect:1"
    build_image(ctx, tag, BuildOptions(network="host", force=True), manifest=read_manifest(ctx))
    return tag


@pytest.mark.docker
def test_inspect_of_a_rocm_10_image_judges_what_torch_loads_from_core(rocm10_image):
    """`envbuild inspect IMAGE` on an image with ROCm under /opt/rocm/core-10.1 only: the verdict is about the
    libraries torch loads from there, and the one it does not load is a note with its core-10.1 path."""
    present = CliRunner().invoke(main, ["inspect", rocm10_image, "--arch", "gfx1030"])
    assert present.exit_code == 0, present.output
    assert "gfx1030: present in every GPU binary and kernel library torch loads" in present.output
    assert (
        "note: gfx1030 is missing in /opt/rocm/core-10.1/lib/hipblaslt/library, which torch does not load"
        in present.output
    )
    missing = CliRunner().invoke(main, ["inspect", rocm10_image, "--arch", "gfx942", "--json"])
    assert missing.exit_code == 1, missing.output
    assert json.loads(missing.output)["missing_in"] == ["/opt/rocm/core-10.1/lib/librocrand.so.1.1"]
