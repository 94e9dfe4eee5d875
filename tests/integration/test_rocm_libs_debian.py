"""The arch check on real ROCm 6.4 libraries: Debian sid's rocBLAS, hipBLASLt, rocRAND, rocFFT and HIP runtime.

`bash .ci/debian_rocm_libs.sh` fetches and unpacks them (no GPU needed to read their code objects) into
.envbuild/debian-rocm/root (or $ENVBUILD_ROCM_LIBS_CACHE/root). Without them these tests skip, except under
ENVBUILD_REQUIRE_ROCM_LIBS=1 (CI), where they fail. Independent references: llvm-15's clang-offload-bundler
for fat binaries, `readelf -d` for DT_NEEDED, the kernel file names as `ls` shows them.

What Debian built (its packages' arch lists, read off the files): rocBLAS, rocRAND and rocFFT carry gfx803,
gfx900, gfx906, gfx908, gfx90a, gfx1010, gfx1030, gfx1100-1102, not gfx942; hipBLASLt carries gfx908,
gfx90a, gfx1100-1103, gfx1150, gfx1151, gfx1200, gfx1201, so not gfx1030. A "torch" for the probe tests is an
ELF library made with `ld` whose DT_NEEDED names chosen Debian libraries.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from verify_fixtures import rocm_expect, run_verify, stand_in_torch
from workload.binaries.code_object_reader import coverage, loaded_split, scan_binary
from workload.binaries.elf_needed import closure, needed

REPO = Path(__file__).resolve().parents[2]
ROOT = Path(os.environ.get("ENVBUILD_ROCM_LIBS_CACHE", REPO / ".envbuild" / "debian-rocm")) / "root"
LIB = ROOT / "usr" / "lib" / "x86_64-linux-gnu"
BUNDLER = Path("/usr/lib/llvm-15/bin/clang-offload-bundler")
MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


def _missing(what: str) -> None:
    if os.environ.get("ENVBUILD_REQUIRE_ROCM_LIBS") == "1":
        pytest.fail(f"ENVBUILD_REQUIRE_ROCM_LIBS=1 but {what}", pytrace=False)
    pytest.skip(what)


@pytest.fixture(scope="module")
def lib() -> Path:
    if not (ROOT / ".complete").is_file():
        _missing(f"no Debian ROCm libraries in {ROOT}: run `bash .ci/debian_rocm_libs.sh`")
    return LIB


@pytest.fixture(scope="module")
def rocblas_kernels(lib) -> Path:
    found = sorted(lib.glob("rocblas/*/library"))
    assert len(found) == 1, f"Debian's rocBLAS kernel dir moved: {found}"
    return found[0]


def _names_with(directory: Path, arch: str) -> int:
    """Files whose name carries `arch` as a whole word (gfx90a, not gfx90a in gfx90ab): `ls | grep -w`."""
    return sum(1 for f in os.listdir(directory) if re.search(rf"(?<![0-9a-z]){arch}(?![0-9a-z])", f))


def _bundler_targets(binary: Path, tmp: Path) -> list[str]:
    """Every GPU target clang-offload-bundler lists, bundle by bundle, in the file's .hip_fatbin section."""
    if not BUNDLER.exists():
        _missing("no llvm-15 clang-offload-bundler (apt-get install clang-tools-15)")
    section = tmp / f"{binary.name}.fatbin"
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.hip_fatbin", str(binary), str(section)], check=True)
    data = section.read_bytes()
    starts = [m.start() for m in re.finditer(re.escape(MAGIC), data)]
    targets = set()
    for start, end in zip(starts, [*starts[1:], len(data)]):
        piece = tmp / "bundle"
        piece.write_bytes(data[start:end])
        listed = subprocess.run(
            [str(BUNDLER), "--list", "--type=o", f"--input={piece}"], check=True, capture_output=True, text=True
        ).stdout.split()
        targets |= {t.split("amdhsa-", 1)[1].lstrip("-") for t in listed if "amdgcn" in t}
    return sorted(targets)


@pytest.mark.parametrize("name", ["librocrand.so.1", "librocfft.so.0"])
def test_fat_binary_targets_agree_with_clang_offload_bundler(lib, tmp_path, name):
    scanned = scan_binary(lib / name)
    assert scanned.bundles == len(re.findall(re.escape(MAGIC), (lib / name).read_bytes()))
    assert scanned.targets == _bundler_targets(lib / name, tmp_path)
    assert "gfx90a" in scanned.archs and "gfx942" not in scanned.archs


def test_dt_needed_agrees_with_readelf(lib):
    libraries = sorted(p for p in lib.iterdir() if ".so." in p.name)
    assert len(libraries) >= 7
    for library in libraries:
        dynamic = subprocess.run(["readelf", "-d", str(library)], check=True, capture_output=True, text=True).stdout
        assert needed(library) == re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic), library


def test_inspect_reads_rocblas_fat_binary_and_its_versioned_tensile_dir(lib, rocblas_kernels):
    """`envbuild inspect` on Debian's lib dir: each real library once (not once per symlink), rocBLAS's
    Tensile files in rocblas/<version>/library counted per arch as `ls` shows them."""
    result = CliRunner().invoke(main, ["inspect", str(lib), "--arch", "gfx90a", "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["verdict"] == "present"
    paths = sorted(Path(b["path"]).name for b in record["binaries"])
    assert paths == ["librocblas.so.4.4", "librocfft.so.0.1", "librocrand.so.1.1"]
    rocblas = next(b for b in record["binaries"] if b["path"].endswith("librocblas.so.4.4"))
    assert rocblas["bundles"] > 1 and rocblas["compressed_bundles"] == 0 and "gfx90a" in rocblas["targets"]
    counts = record["library_files"][str(rocblas_kernels)]
    for arch in ("gfx90a", "gfx908", "gfx1030"):
        assert counts[arch] == _names_with(rocblas_kernels, arch) > 0
    assert any(f.endswith(".dat") for f in os.listdir(rocblas_kernels))
    assert {".co", ".hsaco"} <= {Path(f).suffix for f in os.listdir(rocblas_kernels)}


def test_inspect_names_every_library_and_kernel_dir_that_lacks_gfx942(lib, rocblas_kernels):
    result = CliRunner().invoke(main, ["inspect", str(lib), "--arch", "gfx942"])
    assert result.exit_code == 1, result.output
    assert "gfx942: MISSING" in result.output and "invalid device function" in result.output
    missing = coverage([lib], "gfx942").missing_in()
    assert sorted(Path(p).name for p in missing) == [
        "library",
        "library",
        "librocblas.so.4.4",
        "librocfft.so.0.1",
        "librocrand.so.1.1",
    ]
    assert str(rocblas_kernels) in missing and str(lib / "hipblaslt" / "library") in missing


def _fake_torch(tmp_path: Path, lib: Path, *loads: str) -> Path:
    """torch/lib holding libtorch_hip.so, an ELF library (made with binutils' ld) whose DT_NEEDED are `loads`."""
    torch_lib = tmp_path / "torch" / "lib"
    torch_lib.mkdir(parents=True)
    if shutil.which("ld") is None:
        _missing("no ld (apt-get install binutils)")
    subprocess.run(
        [
            "ld",
            "-shared",
            "-o",
            str(torch_lib / "libtorch_hip.so"),
            "--no-as-needed",
            *[str(lib / name) for name in loads],
        ],
        check=True,
        capture_output=True,
    )
    assert needed(torch_lib / "libtorch_hip.so") == list(loads)
    return torch_lib


def test_what_torch_loads_follows_dt_needed_transitively(lib, tmp_path, rocblas_kernels):
    torch_lib = _fake_torch(tmp_path, lib, "librocblas.so.4", "libhiprand.so.1")
    names = sorted(p.name for p in closure([torch_lib / "libtorch_hip.so"], [torch_lib, lib]))
    assert names == [
        "libamdhip64.so.6.4.43484",
        "libhiprand.so.1.1",
        "librocblas.so.4.4",
        "librocrand.so.1.1",
        "libtorch_hip.so",
    ]
    loaded, other = loaded_split(torch_lib, [lib], "gfx90a")
    assert sorted(Path(b.path).name for b in loaded.binaries) == ["librocblas.so.4.4", "librocrand.so.1.1"]
    assert list(loaded.library_files) == [str(rocblas_kernels)]
    assert [Path(b.path).name for b in other.binaries] == ["librocfft.so.0.1"]
    assert list(other.library_files) == [str(lib / "hipblaslt" / "library")]


def _probe(monkeypatch, torch_lib: Path, lib: Path, arch: str) -> dict:
    """The arch_code_objects probe on a simulated ROCm GPU of `arch`, torch compiled for it, over real files."""
    import torch

    import workload.probes.code_object_probe as probe

    monkeypatch.setattr(torch.version, "hip", "6.4.43484", raising=False)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(gcnArchName=f"{arch}:sramecc+:xnack-")
    )
    monkeypatch.setattr(torch._C, "_cuda_getArchFlags", lambda: f"{arch} gfx90a", raising=False)
    monkeypatch.setattr(probe, "library_dirs", lambda: (torch_lib, [lib]))
    return probe.arch_code_objects(types.SimpleNamespace(on_gpu=True, device=torch.device("cuda", 0)))


def test_probe_notes_a_library_torch_does_not_load_that_lacks_the_arch(lib, tmp_path, monkeypatch):
    """gfx1030 (Radeon PRO W6800): the rocBLAS, rocRAND and rocFFT torch loads have it; Debian's hipBLASLt,
    which this torch does not load, lacks it: a pass with a note."""
    torch_lib = _fake_torch(tmp_path, lib, "librocblas.so.4", "libhiprand.so.1", "libhipfft.so.0")
    record = _probe(monkeypatch, torch_lib, lib, "gfx1030")
    assert record["status"] == "pass", record["message"]
    assert record["values"]["missing_in"] == []
    assert record["values"]["other_missing_in"] == [str(lib / "hipblaslt" / "library")]
    note = f"note: gfx1030 is missing in {lib / 'hipblaslt' / 'library'}, which torch does not load"
    assert note in record["message"]


def test_probe_fails_when_a_library_torch_loads_lacks_the_arch(lib, tmp_path, monkeypatch):
    torch_lib = _fake_torch(tmp_path, lib, "librocblas.so.4", "libhipblaslt.so.1")
    record = _probe(monkeypatch, torch_lib, lib, "gfx1030")
    assert record["status"] == "fail"
    assert record["values"]["missing_in"] == [str(lib / "hipblaslt" / "library")]
    assert f"no gfx1030 code objects in {lib / 'hipblaslt' / 'library'} (loaded by torch)" in record["message"]


def test_probe_fails_on_gfx942_through_a_library_torch_loads_indirectly(lib, tmp_path, monkeypatch, rocblas_kernels):
    """MI300X: Debian built none of these for gfx942. torch loads rocRAND only through hipRAND, and rocBLAS."""
    torch_lib = _fake_torch(tmp_path, lib, "librocblas.so.4", "libhiprand.so.1")
    record = _probe(monkeypatch, torch_lib, lib, "gfx942")
    assert record["status"] == "fail"
    assert record["values"]["missing_in"] == [
        str(lib / "librocblas.so.4.4"),
        str(lib / "librocrand.so.1.1"),
        str(rocblas_kernels),
    ]
    assert record["values"]["other_missing_in"] == [str(lib / "librocfft.so.0.1"), str(lib / "hipblaslt" / "library")]
    record = _probe(monkeypatch, torch_lib, lib, "gfx90a")
    assert record["status"] == "pass" and record["message"] == ""


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)  # the Debian cache and tmp_path share a file system here: no 150 MB copies
    except OSError:
        shutil.copy2(source, target)


def _wheel_like_torch(tmp_path: Path, lib: Path, *loads: str) -> tuple[Path, Path]:
    """(site dir, torch/lib) of a stand-in torch whose torch/lib bundles Debian's libraries, as an official ROCm
    wheel bundles its own: libtorch_hip.so (DT_NEEDED = `loads`), hipRAND, rocRAND, the HIP runtime and
    hipBLASLt with its gfx908 kernel files (a real subset of its kernel dir, which lacks gfx1030 whole)."""
    site = stand_in_torch(tmp_path / "site", flags="gfx1030 gfx90a")
    torch_lib = _fake_torch(site, lib, *loads)
    for name in ("libhiprand.so.1.1", "librocrand.so.1.1", "libamdhip64.so.6.4.43484", "libhipblaslt.so.1.1"):
        _link_or_copy(lib / name, torch_lib / name)
    for soname in ("libhiprand.so.1", "librocrand.so.1", "libamdhip64.so.6", "libhipblaslt.so.1"):
        os.symlink(os.readlink(lib / soname), torch_lib / soname)
    kernels = torch_lib / "hipblaslt" / "library"
    kernels.mkdir(parents=True)
    for kernel in (lib / "hipblaslt" / "library").glob("*gfx908*"):
        _link_or_copy(kernel, kernels / kernel.name)
    return site, torch_lib


def test_verify_step_notes_a_bundled_library_torch_does_not_load_that_lacks_the_arch(lib, tmp_path):
    """The image's verify step, gfx1030: the rocRAND torch loads (through hipRAND) has it; the bundled
    hipBLASLt, which this torch does not load, lacks it: the build passes and verify.json notes it."""
    site, torch_lib = _wheel_like_torch(tmp_path, lib, "libhiprand.so.1")
    code, out, record = run_verify(tmp_path, rocm_expect("gfx1030"), site)
    assert code == 0, out
    coverage_record = record["arch_coverage"]
    assert coverage_record["verdict"] == "present"
    assert sorted(Path(b["path"]).name for b in coverage_record["binaries"]) == ["librocrand.so.1.1"]
    assert record["notes"] == [
        f"gfx1030 is missing in {torch_lib / 'hipblaslt' / 'library'}, which torch does not load"
    ]


def test_verify_step_fails_when_a_library_torch_loads_lacks_the_arch(lib, tmp_path):
    site, torch_lib = _wheel_like_torch(tmp_path, lib, "libhiprand.so.1", "libhipblaslt.so.1")
    code, out, record = run_verify(tmp_path, rocm_expect("gfx1030"), site)
    assert code == 1
    assert [c["name"] for c in record["checks"] if not c["ok"]] == ["code objects for gfx1030 in what torch loads"]
    assert record["arch_coverage"]["missing_in"] == [str(torch_lib / "hipblaslt" / "library")]
    assert f"missing in {torch_lib / 'hipblaslt' / 'library'} (loaded by torch)" in out
    assert record["notes"] == []


IMAGE_DOCKERFILE = """\
FROM {base}
RUN ln -s /usr/bin/python3 /usr/local/bin/python
COPY workload/ /opt/envbuild/workload/
COPY torch/ /opt/envbuild/torch/
COPY rocm/ /opt/rocm/lib/
"""


@pytest.fixture(scope="module")
def rocm_image(lib, tools_image, tmp_path_factory) -> str:
    """tools_image + this checkout's workload + a 'torch' package whose libtorch_hip.so loads hipRAND (so
    rocRAND), and in /opt/rocm/lib Debian's hipRAND, rocRAND, HIP runtime, rocFFT (loaded by nothing) and
    hipBLASLt's gfx908 kernel files (a real subset of its kernel dir, which lacks gfx1030 whole)."""
    from builder.engine.build import BuildOptions, build_image
    from builder.plan.render import read_manifest

    ctx = tmp_path_factory.mktemp("rocm-image")
    shutil.copytree(REPO / "workload", ctx / "workload", ignore=shutil.ignore_patterns("__pycache__"))
    rocm = ctx / "rocm"
    (rocm / "hipblaslt" / "library").mkdir(parents=True)
    for name in ("libhiprand.so.1.1", "librocrand.so.1.1", "libamdhip64.so.6.4.43484", "librocfft.so.0.1"):
        shutil.copy(lib / name, rocm / name)
    for soname in ("libhiprand.so.1", "librocrand.so.1", "libamdhip64.so.6", "librocfft.so.0"):
        os.symlink(os.readlink(lib / soname), rocm / soname)
    for kernel in (lib / "hipblaslt" / "library").glob("*gfx908*"):
        shutil.copy(kernel, rocm / "hipblaslt" / "library" / kernel.name)
    torch_lib = _fake_torch(ctx, lib, "libhiprand.so.1")
    (torch_lib.parent / "__init__.py").write_text("")
    (ctx / "Dockerfile").write_text(IMAGE_DOCKERFILE.format(base=tools_image))
    tag = "envbuild-test/rocm-inspect:1"
    build_image(ctx, tag, BuildOptions(network="host", force=True), manifest=read_manifest(ctx))
    return tag


@pytest.mark.docker
def test_inspect_of_an_image_judges_what_torch_loads_and_notes_the_rest(rocm_image):
    present = CliRunner().invoke(main, ["inspect", rocm_image, "--arch", "gfx1030"])
    assert present.exit_code == 0, present.output
    assert "gfx1030: present in every GPU binary and kernel library torch loads" in present.output
    assert "note: gfx1030 is missing in /opt/rocm/lib/hipblaslt/library, which torch does not load" in present.output
    missing = CliRunner().invoke(main, ["inspect", rocm_image, "--arch", "gfx942", "--json"])
    assert missing.exit_code == 1, missing.output
    record = json.loads(missing.output)
    assert record["missing_in"] == ["/opt/rocm/lib/librocrand.so.1.1"]
    assert record["not_loaded"]["missing_in"] == ["/opt/rocm/lib/librocfft.so.0.1", "/opt/rocm/lib/hipblaslt/library"]
