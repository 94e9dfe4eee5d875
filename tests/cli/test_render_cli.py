"""`envbuild render` and `envbuild recipes list` through Click: good requests write, bad ones exit 2 and write nothing."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from builder.cli import main


def invoke(*args):
    return CliRunner().invoke(main, list(args))


BAD_REQUESTS = {
    "unknown-rocm": (["--rocm", "6.5", "--torch", "2.4"], ["unknown ROCm release '6.5'", "6.4"]),
    "unknown-torch": (["--rocm", "6.2", "--torch", "2.19"], ["unknown torch '2.19'", "2.11"]),
    "wheel-only-line": (
        ["--rocm", "6.2", "--torch", "2.9"],
        ["torch 2.9 is offered as an official wheel only", "releases whose index carries it: 6.4"],
    ),
    "no-source-on-7x": (
        ["--rocm", "7.2", "--torch", "2.6", "--torch-source", "source"],
        ["no torch source build on ROCm 7.2", "source_build = false"],
    ),
    "unpinned-torch-release": (
        ["--rocm", "6.2", "--torch", "2.4.0"],
        ["not the release envbuild pins for line 2.4 (2.4.1)", "--torch 2.4"],
    ),
    "unknown-arch": (
        ["--rocm", "6.2", "--torch", "2.4", "--arch", "gfx90"],
        ["'gfx90' is not supported by ROCm 6.2", "gfx90a"],
    ),
    "arch-not-in-release": (
        ["--rocm", "6.1.2", "--torch", "2.3", "--arch", "gfx1201"],
        ["not supported by ROCm 6.1.2", "gfx1100"],
    ),
    "unknown-python": (["--rocm", "6.2", "--torch", "2.4", "--python", "3.7"], ["Python 3.7 is not available", "3.9"]),
    "python-outside-torch-range": (
        ["--rocm", "6.1.2", "--torch", "2.3", "--python", "3.12"],
        ["Python 3.12 is outside torch 2.3's range 3.8-3.11", "3.11"],
    ),
    "wheel-without-official-wheel": (
        ["--rocm", "6.2", "--torch", "2.4", "--torch-source", "wheel"],
        ["no official torch 2.4 wheel for ROCm 6.2", "--torch-source source", "2.5"],
    ),
    "unknown-flavor": (["--flavor", "tpu", "--torch", "2.4"], ["unknown flavor 'tpu'", "cpu, cuda, rocm"]),
    "rocm-missing": (["--torch", "2.4"], ["--rocm VERSION is required", "6.1.2, 6.2"]),
    "cpu-with-rocm": (["--flavor", "cpu", "--rocm", "6.2", "--torch", "2.13"], ["conflicts with --flavor cpu"]),
    "cpu-with-arch": (["--flavor", "cpu", "--torch", "2.13", "--arch", "gfx90a"], ["has no GPU arch"]),
    "cpu-source-build": (["--flavor", "cpu", "--torch", "2.13", "--torch-source", "source"], ["no torch source build"]),
    "cpu-old-torch": (["--flavor", "cpu", "--torch", "2.4"], ["unknown torch '2.4' for the cpu flavor", "2.13"]),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_request_exits_2_names_the_problem_and_writes_nothing(case, tmp_path):
    args, expected = BAD_REQUESTS[case]
    out = tmp_path / "ctx"
    result = invoke("render", *args, "-o", str(out))
    assert result.exit_code == 2, result.output
    for text in expected:
        assert text in result.output
    assert result.output.count("Error:") == 1
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_render_writes_a_context_and_says_how_torch_is_obtained(tmp_path):
    result = invoke("render", "--rocm", "6.2", "--torch", "2.4", "-o", str(tmp_path / "ctx"))
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())
    assert "torch: source (no official torch 2.4 wheel for ROCm 6.2" in said
    assert "none: the first passing build is the proof" in said
    manifest = json.loads((tmp_path / "ctx" / "manifest.json").read_text())
    assert manifest["image_tag"] in result.stdout
    git = manifest["torch"]["git"]
    assert {k: v for k, v in git.items() if k not in ("checked", "tag_checked")} == {
        "repo": "https://github.com/pytorch/pytorch.git",
        "ref": "v2.4.1",
        "commit": "38b96d3399a695e704ed39b60dac733c3fbf20e2",
        "tag_commit": "ee1b6804381c57161c477caa380a840a84167676",
        "why": "the source PyTorch's own 2.4.1 release wheels were compiled from",
        "fork": False,
        "proof": "unproven",
        "peer": None,
    }
    assert "torch-2.4.1-cp310-none-macosx_11_0_arm64.whl" in git["checked"]
    assert "spack/spack-packages@000faf0" in git["tag_checked"]
    assert manifest["labels"]["io.envbuild.torch-proof"] == "unproven"
    assert manifest["labels"]["io.envbuild.torch-git-origin"] == "upstream"
    assert (tmp_path / "ctx" / "Dockerfile").is_file()


def test_auto_takes_the_official_wheel_where_one_exists(tmp_path):
    result = invoke("render", "--rocm", "6.1.2", "--torch", "2.4", "-o", str(tmp_path / "ctx"))
    assert result.exit_code == 0, result.output
    assert "torch: wheel (official wheel from the rocm6.1 index" in " ".join(result.output.split())
    manifest = json.loads((tmp_path / "ctx" / "manifest.json").read_text())
    assert manifest["torch"]["requirement"] == "torch==2.4.1+rocm6.1"


def test_cpu_render_with_local_base_image(tmp_path):
    result = invoke(
        "render",
        "--flavor",
        "cpu",
        "--torch",
        "2.13",
        "--base-image",
        "envbuild-local/debian:bookworm",
        "-o",
        str(tmp_path / "ctx"),
    )
    assert result.exit_code == 0, result.output
    dockerfile = (tmp_path / "ctx" / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=envbuild-local/debian:bookworm\n" in dockerfile
    assert "ARG TORCH_VERSION=2.13.0+cpu\n" in dockerfile
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu\n" in dockerfile


def test_render_refuses_a_foreign_directory_with_exit_2(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    result = invoke("render", "--flavor", "cpu", "--torch", "2.13", "-o", str(tmp_path))
    assert result.exit_code == 2 and "not an envbuild build context" in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_recipes_list_shows_cells_routes_and_sources():
    proven = {row["cell"]: row for row in json.loads(invoke("recipes", "list", "--json", "--proven-only").output)}
    assert "rocm6.2-torch2.5-gfx90a-py3.10" in proven and "rocm6.2-torch2.4-gfx90a-py3.10" not in proven
    assert {row["proof"] for row in proven.values()} == {"official wheel", "AMD's wheel"}  # AMD's: from AMD's index
    result = invoke("recipes", "list", "--json")
    assert result.exit_code == 0, result.output
    rows = {row["cell"]: row for row in json.loads(result.output)}
    assert json.loads(invoke("recipes", "list", "--json", "--unproven").output) == list(rows.values())  # a no-op
    assert rows["rocm6.2-torch2.4-gfx90a-py3.10"]["torch_source"] == "source"
    assert rows["rocm6.2-torch2.4-gfx90a-py3.10"]["proof"] == "unproven"
    assert rows["rocm6.2-torch2.4-gfx90a-py3.10"]["reason"].startswith("source build, not yet proven")
    assert rows["rocm6.2-torch2.5-gfx90a-py3.10"]["torch_source"] == "wheel"
    assert rows["rocm6.1.2-torch2.3-gfx90a-py3.10"]["torch_source"] == "source"
    assert rows["cpu-torch2.13-py3.11"]["torch_source"] == "wheel"
    assert "rocm6.1.2-torch2.3-gfx90a-py3.12" not in rows  # outside torch 2.3's Python range
    assert all(row["fact_source"] for row in rows.values())
    table = invoke("recipes", "list", "--flavor", "cpu")
    assert table.exit_code == 0 and "cpu-torch2.13-py3.11" in table.output and "rocm6.2" not in table.output
    assert invoke("recipes", "list", "--flavor", "tpu").exit_code == 2


@pytest.mark.parametrize("width", [80, 160])
def test_recipes_list_fits_the_terminal(width, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    result = invoke("recipes", "list")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= width
    assert any(line.split()[:1] == ["rocm6.2-torch2.5-gfx942-py3.12"] for line in lines)  # cell keys never cut


@pytest.mark.parametrize(
    "given, target, name",
    [
        ("MI250X", "gfx90a", "MI250X"),
        ("instinct mi-300x", "gfx942", "MI300X"),
        ("AMD Instinct MI355X", "gfx950", "MI355X"),
        ("RX 9070 XT", "gfx1201", "RX 9070 XT"),
        ("MI325X", "gfx942", "MI325X"),
        ("mi350x", "gfx950", "MI350X"),
        ("Radeon RX 7900 XTX", "gfx1100", "RX 7900 XTX"),
    ],
)
def test_marketing_names_are_aliases_and_are_echoed_back(given, target, name, tmp_path):
    """--arch takes AMD's marketing names (recipes/gpu-names.toml): the cell is the gfx target's, byte for byte, and
    the plan says which name was given."""
    from builder.plan.resolve import Request, resolve

    alias = resolve(Request(accel_version="7.2", torch="2.11", arch=given))
    plain = resolve(Request(accel_version="7.2", torch="2.11", arch=target))
    assert alias.cell == plain.cell and alias.recipe_hash == plain.recipe_hash and alias.arch_name == name
    result = invoke("render", "--rocm", "7.2", "--torch", "2.11", "--arch", given, "-o", str(tmp_path / "ctx"))
    assert result.exit_code == 0, result.output
    assert f"{target} (--arch {name}" in result.output


def test_a_marketing_name_on_a_release_without_its_arch_names_both():
    result = invoke("render", "--rocm", "6.4", "--torch", "2.8", "--arch", "MI355X", "-o", "/nonexistent/ctx")
    assert result.exit_code == 2 and "arch MI355X (gfx950) is not supported by ROCm 6.4" in result.output


def test_an_unknown_gpu_name_gets_gpu_names_not_gfx_targets():
    """--arch MI400 (no such name in recipes/gpu-names.toml): the refusal suggests the nearest GPU names the release
    supports, with their targets, not the nearest gfx strings (which for "MI400" were Radeon targets)."""
    result = invoke("render", "--rocm", "7.14", "--torch", "2.14", "--arch", "MI400", "-o", "/nonexistent/ctx")
    assert result.exit_code == 2 and "Traceback" not in result.output
    message = " ".join(result.output.split())
    assert (
        "unknown GPU 'MI400' (recipes/gpu-names.toml); nearest known GPU names on ROCm 7.14: MI100 (gfx908), "
        "MI300X (gfx942), MI300A (gfx942); or give a gfx target:" in message
    )
    near = message.split("nearest known GPU names on ROCm 7.14: ")[1].split("; or give")[0]
    assert "gfx1" not in near  # no Radeon target offered for an Instinct-like name
    unknown = invoke("render", "--rocm", "6.4", "--torch", "2.8", "--arch", "gfx999", "-o", "/nonexistent/ctx")
    assert unknown.exit_code == 2 and "arch 'gfx999' is not supported by ROCm 6.4; nearest valid:" in unknown.output


def test_recipes_list_has_torch_through_2_14_and_the_pip_rocm_releases(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    result = invoke("recipes", "list")
    assert result.exit_code == 0, result.output
    keys = {line.split()[0] for line in result.output.splitlines() if line.strip().startswith("rocm")}
    assert {
        "rocm7.1-torch2.12-gfx942-py3.12",
        "rocm7.2-torch2.13-gfx942-py3.12",
        "rocm7.2-torch2.14-gfx942-py3.12",
        "rocm7.14-torch2.14-gfx942-py3.12",
        "rocm7.14-torch2.14-gfx1151-py3.12",
        "rocm10.0-torch2.13-gfx950-py3.12",
    } <= keys


def test_render_of_the_pip_rocm_route_writes_one_archs_wheels_in_both_recipes(tmp_path):
    """`envbuild render --rocm 7.14 --torch 2.14 --arch gfx942 -o DIR`: exit 0, the plan names the SDK wheels of
    gfx942, and DIR's Dockerfile and cell.def install them (and no other arch's) before torch 2.14.0+rocm7.14."""
    out = tmp_path / "ctx"
    result = invoke("render", "--rocm", "7.14", "--torch", "2.14", "--arch", "gfx942", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "rocm[libraries,device-gfx942]==7.14.0" in " ".join(result.output.split())
    for name in ("Dockerfile", "cell.def"):
        text = (out / name).read_text()
        assert "rocm[libraries,device-gfx942]==7.14.0" in text and "2.14.0+rocm7.14" in text, name
        assert "device-all" not in text and "device-gfx950" not in text, name
    assert (out / "common" / "install_accel_wheels.sh").is_file()
