"""resolve.py's choices and messages one by one: the plan `envbuild render` prints, the nearest valid values a
refusal names, which route each --torch-source takes, and what the refusals of cells without a torch suggest."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from builder.plan.recipes import load
from builder.plan.resolve import (
    NoSuchCellError,
    Request,
    ResolveError,
    UnprovenSourceError,
    _nearest,
    all_plans,
    nearest_proven,
    resolve,
)
from tests.plan.test_recipes import CUDA_FLAVOR, CUDA_RELEASES, FORK_BUILD, PATCH

SHA = "0123456789abcdef0123456789abcdef01234567"
ESTIMATE = load().flavors["rocm"].source_build_estimate


def _rows(plan) -> list[tuple[str, str]]:
    """The printed plan without the HF stack's pins (recipes/hf-stack.toml's business)."""
    return [(k, v) for k, v in plan.describe() if k not in plan.stack]


def _refusal(request: Request, recipes=None, error: type[ResolveError] = ResolveError) -> str:
    with pytest.raises(error) as caught:
        resolve(request, recipes)
    return str(caught.value)


def test_the_plan_of_a_wheel_cell_asked_by_its_marketing_name():
    plan = resolve(Request(accel_version="7.2", torch="2.11", arch="MI300X"))
    assert _rows(plan) == [
        ("cell", "rocm7.2-torch2.11-gfx942-py3.12"),
        ("arch", "gfx942 (--arch MI300X: recipes/gpu-names.toml)"),
        ("base image", "rocm/dev-ubuntu-24.04:7.2"),
        ("python", "3.12"),
        ("torch", "torch==2.11.0+rocm7.2 (wheel: official wheel from the rocm7.2 index (auto: a wheel exists))"),
        ("evidence", "official wheel: PyTorch's own build of this torch, from its index"),
        ("torch index", "https://download.pytorch.org/whl/rocm7.2"),
        ("stages", "base -> torch-wheel -> sentencepiece -> runtime"),
        ("recipe hash", plan.recipe_hash[:12]),
    ]
    assert len(plan.recipe_hash) == 64
    assert "arch" not in dict(_rows(resolve(Request(accel_version="7.2", torch="2.11", arch="gfx942"))))


def test_the_plan_of_a_wheel_cell_installed_on_ubuntu_names_the_installer_and_the_wheels_triton():
    plan = resolve(Request(accel_version="6.2", torch="2.5", install_accel=True, torch_source="".join(["wh", "eel"])))
    assert _rows(plan)[:8] == [
        ("cell", "rocm6.2-torch2.5-gfx90a-py3.10"),
        ("base image", "ubuntu:22.04"),
        ("ROCm install", "amdgpu-install 6.2.60200 --usecase=rocm --no-dkms"),
        ("python", "3.10"),
        ("torch", "torch==2.5.1+rocm6.2 (wheel: official wheel from the rocm6.2 index)"),
        ("evidence", "official wheel: PyTorch's own build of this torch, from its index"),
        ("torch index", "https://download.pytorch.org/whl/rocm6.2"),
        ("triton", "pytorch-triton-rocm==3.1.0 (pulled by the wheel from its index)"),
    ]
    assert plan.pinned()["torch"]["git"] is None and plan.patches == () and plan.patch_dir is None


def test_the_plan_of_an_unproven_source_cell_says_so_and_what_it_builds():
    plan = resolve(Request(accel_version="6.2", torch="2.4", torch_source="".join(["sou", "rce"])))
    rows = dict(_rows(plan))
    assert plan.unproven and plan.torch_source == "source"
    assert rows["torch source"] == (
        "https://github.com/pytorch/pytorch.git @ 38b96d3399a695e704ed39b60dac733c3fbf20e2, the commit v2.4.1's own "
        "wheels record (the tag v2.4.1 points at ee1b6804381c57161c477caa380a840a84167676) (upstream)"
    )
    assert rows["peer build"] == "none: the first passing build is the proof"
    assert rows["evidence"] == "source build, not yet proven: the first passing build is the proof"
    assert rows["patches"] == "caffe2-2.4.0-exclude-aotriton.patch" and rows["build size"] == ESTIMATE
    assert rows["OS packages"].startswith("rocm-dev rocm-utils rocm-libs rccl")
    assert rows["apt pins"] == (
        "repository build 60200-66~22.04; exact rocm-llvm-dev=18.0.0.24292.60200-66~22.04; at that build's version "
        "(read at build time) rocm-dev rocm-utils rocm-libs rccl rocprofiler-dev roctracer-dev amd-smi-lib; "
        "unpinned libopenblas-dev"
    )
    unpinned = dict(_rows(resolve(Request(accel_version="6.1.2", torch="2.3"))))["apt pins"]
    assert (
        unpinned.startswith("unpinned: rocm-dev ")
        and "(no version of this release's packages was verified)" in unpinned
    )
    assert rows["torch.compile"] == (
        "pytorch-triton-rocm==3.0.0 from https://download.pytorch.org/whl/rocm6.1 (--no-deps)"
    )
    assert rows["stages"] == (
        "base -> torch-src -> torch-source-build -> torch-source -> torch-compile -> sentencepiece -> runtime"
    )
    assert plan.pinned()["torch"]["build_env"] == dict(sorted(plan.flavor.build_env.items())) != {}


def test_the_plan_of_a_peer_built_fork_cell_names_the_commit_the_peer_and_its_patches(recipes_copy):
    (recipes_copy / "source-builds.toml").write_text(
        (recipes_copy / "source-builds.toml").read_text().replace("build = []\n", FORK_BUILD)
    )
    (recipes_copy / "patches" / "torch-2.4" / "0001-example.patch").write_text(PATCH)
    (recipes_copy / "patches" / "torch-2.4" / "series").write_text("patch 0001-example.patch\n")
    recipes = load(recipes_copy)
    plan = resolve(Request(accel_version="6.2", torch="2.4"), recipes)
    rows = dict(_rows(plan))
    assert rows["torch source"] == f"https://github.com/ROCm/pytorch.git release/2.4 @ {SHA} (fork)"
    assert rows["peer build"] == "https://example.org/peer-build-log" and rows["patches"] == "0001-example.patch"
    assert plan.patch_dir == recipes_copy / "patches" / "torch-2.4"
    # a wheel cell applies no series, its own line's included
    for wheel in (
        resolve(Request(accel_version="6.2", torch="2.5"), recipes),
        resolve(Request(accel_version="6.1.2", torch="2.4", torch_source="wheel"), recipes),
    ):
        assert wheel.patches == () and wheel.patch_dir is None and wheel.source_build is None
        assert wheel.pinned()["patches"] == [] and "patches" not in dict(_rows(wheel))


def test_a_wheel_cell_with_a_peer_built_source_of_its_line_still_takes_the_wheel(recipes_copy):
    build = FORK_BUILD.replace('torch = "2.4"', 'torch = "2.5"').replace('version = "2.4.1"', 'version = "2.5.1"')
    (recipes_copy / "source-builds.toml").write_text(
        (recipes_copy / "source-builds.toml").read_text().replace("build = []\n", build)
    )
    plan = resolve(Request(accel_version="6.2", torch="2.5"), load(recipes_copy))
    assert plan.torch_source == "wheel" and plan.source_build is None and plan.git_source is None


def test_neither_the_request_nor_its_plan_can_be_changed_after_the_plan_was_hashed():
    request = Request(accel_version="6.2", torch="2.5")
    plan = resolve(request)
    with pytest.raises(ValidationError, match="frozen"):
        plan.torch_source = "source"
    with pytest.raises(ValidationError, match="frozen"):
        request.torch = "2.4"


@pytest.mark.parametrize(
    "request_, message",
    [
        (
            Request(accel_version="6.2.5", torch="2.5"),
            "unknown ROCm release '6.2.5'; nearest valid: 6.1.2, 6.2, 6.2.4 "
            "(all: 6.1.2, 6.2, 6.2.4, 6.3, 6.4, 7.0, 7.1, 7.2, 7.14, 7.14.1, 10.0, 10.1)",
        ),
        (
            Request(accel_version="7.1.5", torch="2.10"),
            "unknown ROCm release '7.1.5'; nearest valid: 7.0, 7.1, 7.2 "
            "(all: 6.1.2, 6.2, 6.2.4, 6.3, 6.4, 7.0, 7.1, 7.2, 7.14, 7.14.1, 10.0, 10.1)",
        ),
        (Request(flavor="rocn", torch="2.4"), "unknown flavor 'rocn'; nearest valid: rocm, cpu, cuda"),
        (
            Request(accel_version="6.2", torch="2.4.0"),
            "torch 2.4.0 is not the release envbuild pins for line 2.4 (2.4.1); use --torch 2.4",
        ),
        (
            Request(accel_version="6.2.4", torch="2.6", python="3.11"),
            "Python 3.11 is not available on ROCm 6.2.4; nearest valid: 3.10",
        ),
        (
            Request(flavor="cuda", accel_version="13.0", torch="2.11", arch="MI300X"),
            "arch 'MI300X' is not supported by CUDA 13.0; nearest valid: sm_100, sm_90, sm_80 (all: sm_100, sm_120, sm_75, "
            "sm_80, sm_86, sm_90)",
        ),
    ],
)
def test_a_refusal_names_the_nearest_valid_values(request_, message):
    assert _refusal(request_) == message


@pytest.mark.parametrize(
    "value, choices, n, nearest",
    [
        ("6.2", ["6.2.1", "6.2.0"], 1, ["6.2.0"]),  # 6.2 is 6.2.0: missing parts count as 0, on both sides
        ("6.2.0", ["6.2.1", "6.2"], 1, ["6.2"]),
        ("6.2.0", ["6.2.0.7", "6.2"], 1, ["6.2"]),
        ("6.2.0.0", ["6.2.0.0.9", "6.2"], 1, ["6.2"]),
        ("6.2", ["6.2.0.1", "6.2.0.0.5"], 1, ["6.2.0.0.5"]),
        ("7.1.5", ["6.1.2", "6.2", "7.0", "7.1", "7.2"], 3, ["7.0", "7.1", "7.2"]),  # distance, not sum
        ("10", ["1", "9", "11", "20"], 2, ["9", "11"]),
        ("gfx90b", ["gfx1030", "gfx90a", "gfx942"], 1, ["gfx90a"]),  # not numbers: spelling
    ],
)
def test_the_nearest_values_are_the_closest_by_version_distance_or_spelling(value, choices, n, nearest):
    assert _nearest(value, choices, n) == nearest


def test_a_refusal_with_no_choice_says_there_are_none(recipes_copy):
    import shutil

    shutil.rmtree(recipes_copy / "flavors.d")  # the real cuda flavor; a test-only one with no torch line instead
    (recipes_copy / "flavors.toml").write_text((recipes_copy / "flavors.toml").read_text() + CUDA_FLAVOR)
    (recipes_copy / "cuda.toml").write_text(CUDA_RELEASES)
    assert _refusal(Request(flavor="cuda", accel_version="12.4", torch="2.5"), load(recipes_copy)) == (
        "unknown torch '2.5' for the cuda flavor (known lines: ); there are none"
    )


@pytest.mark.parametrize(
    "request_, error, message",
    [
        (
            Request(accel_version="6.2", torch="2.4", torch_source="wheel"),
            NoSuchCellError,
            "no official torch 2.4 wheel for ROCm 6.2 (torch 2.4 wheels: rocm6.1; ROCm 6.2 takes: rocm6.2); use "
            "--torch-source source or a torch line with a wheel for ROCm 6.2: 2.5",
        ),
        (
            Request(accel_version="6.1.2", torch="2.11"),
            NoSuchCellError,
            "no official torch 2.11 wheel for ROCm 6.1.2 (torch 2.11 wheels: cu130, rocm7.1, rocm7.2, rocm7.14.1; ROCm "
            "6.1.2 takes: rocm6.1); torch 2.11 is offered as an official wheel only; releases whose index carries it: "
            "7.1, 7.2, 7.14.1",
        ),
        (
            Request(accel_version="6.2.4", torch="2.5"),
            NoSuchCellError,  # no source build there: only other lines
            "no official torch 2.5 wheel for ROCm 6.2.4 (torch 2.5 wheels: rocm6.1, rocm6.2; ROCm 6.2.4 takes: rocm6.2.4); "
            "use a torch line with a wheel for ROCm 6.2.4: 2.6",
        ),
        (
            Request(flavor="cpu", torch="2.13", torch_source="source"),
            ResolveError,
            "the cpu flavor has no torch source build; use --torch-source wheel or auto",
        ),
        (
            Request(accel_version="7.2", torch="2.11", torch_source="source"),
            ResolveError,
            "torch 2.11 is offered as an official wheel only",
        ),
        (
            Request(accel_version="6.2.4", torch="2.6", torch_source="source"),
            ResolveError,
            "no torch source build on ROCm 6.2.4",
        ),
    ],
)
def test_a_cell_without_a_torch_says_what_would_work(request_, error, message):
    assert _refusal(request_, error=error).startswith(message)


@pytest.mark.parametrize(
    "request_",
    [
        Request(flavor="cpu", torch="2.13", torch_source="wheel"),
        Request(accel_version="7.2", torch="2.11", torch_source="wheel"),
        Request(accel_version="6.2", torch="2.5", torch_source="wheel"),
    ],
)
def test_asking_for_the_wheel_gets_the_wheel(request_):
    plan = resolve(request_)
    assert plan.torch_source == "wheel" and "(auto" not in plan.torch_source_reason
    assert plan.stages == ("base", "torch-wheel", "sentencepiece", "runtime")


@pytest.mark.parametrize(
    "request_, nearest",
    [
        (
            Request(accel_version="6.2", torch="2.6", torch_source="source"),  # releases both sides, a lower line
            [
                "--rocm 6.1.2 --torch 2.6 (official wheel)",
                "--rocm 6.2.4 --torch 2.6 (official wheel)",
                "--rocm 6.2 --torch 2.5 (official wheel)",
            ],
        ),
        (
            Request(accel_version="6.1.2", torch="2.5", torch_source="source"),  # the cell's own wheel first
            [
                "--rocm 6.1.2 --torch 2.5 --torch-source auto (official wheel)",
                "--rocm 6.2 --torch 2.5 (official wheel)",
                "--rocm 6.1.2 --torch 2.4 (official wheel)",
                "--rocm 6.1.2 --torch 2.6 (official wheel)",
            ],
        ),
    ],
)
def test_an_unproven_source_cell_names_the_nearest_cells_with_a_torch_and_proven_only_refuses_it(request_, nearest):
    plan = resolve(request_)
    assert plan.unproven and nearest_proven(plan.flavor, plan.release, plan.torch, load()) == nearest
    refused = _refusal(request_.model_copy(update={"proven_only": True}), error=UnprovenSourceError)
    assert refused.endswith(
        "source build, not yet proven: the first passing build is the proof (--proven-only refuses it)"
    )


def test_a_peer_built_source_is_a_proven_neighbour(recipes_copy):
    (recipes_copy / "source-builds.toml").write_text(
        (recipes_copy / "source-builds.toml").read_text().replace("build = []\n", FORK_BUILD)
    )
    recipes = load(recipes_copy)
    plan = resolve(Request(accel_version="6.1.2", torch="2.4", torch_source="source"), recipes)
    assert "--rocm 6.2 --torch 2.4 (peer-built source)" in nearest_proven(
        plan.flavor, plan.release, plan.torch, recipes
    )


def test_without_the_system_python_a_cell_takes_the_newest_python_its_torch_supports(recipes_copy):
    text = (recipes_copy / "rocm.toml").read_text()
    start = text.index('[release."6.2"]')
    end = text.index("[release.", start + 1)
    block = re.sub(r'system_python = "3.10"', 'system_python = "3.12"', text[start:end])
    (recipes_copy / "rocm.toml").write_text(text[:start] + block + text[end:])
    plan = resolve(Request(accel_version="6.2", torch="2.3"), load(recipes_copy))
    assert plan.cell.python == "3.11"  # torch 2.3 takes 3.8-3.11; ROCm 6.2 offers 3.9-3.12


def test_every_cell_lists_the_pythons_after_one_its_torch_cannot_take(recipes_copy):
    text = (recipes_copy / "torch.toml").read_text()
    (recipes_copy / "torch.toml").write_text(text.replace('python = ["3.9", "3.12"]', 'python = ["3.10", "3.12"]', 1))
    keys = {p.cell.key for p in all_plans(load(recipes_copy), flavor="rocm")}
    assert load(recipes_copy).torch["2.5"].python == ("3.10", "3.12")
    assert "rocm6.2-torch2.5-gfx90a-py3.9" not in keys
    assert {"rocm6.2-torch2.5-gfx90a-py3.10", "rocm6.2-torch2.5-gfx90a-py3.12"} <= keys


@pytest.mark.parametrize(
    "request_, error, message",
    [
        (
            Request(accel_version="7.2", torch="2.3"),
            NoSuchCellError,
            "no Python of ROCm 7.2 (3.12) is in torch 2.3's range 3.8-3.11: pick another --torch or release",
        ),
        (
            Request(accel_version="7.2", torch="2.3", python="3.12"),
            ResolveError,
            "Python 3.12 is outside torch 2.3's range 3.8-3.11; there are none",
        ),
        (
            Request(accel_version="7.2", torch="2.3", python="3.11"),
            ResolveError,
            "Python 3.11 is not available on ROCm 7.2; nearest valid: 3.12",
        ),
        (
            Request(flavor="cpu", torch="2.13", python="3.9"),
            ResolveError,
            "Python 3.9 is not available on cpu images; nearest valid: 3.11",
        ),
    ],
)
def test_a_python_that_does_not_fit_says_which_would(request_, error, message):
    assert _refusal(request_, error=error) == message


def test_a_wheel_only_line_no_release_carries_and_a_release_with_no_wheel_line_say_so(recipes_copy):
    dropin = recipes_copy / "flavors.d" / "cuda.toml"  # where torch 2.11's line lives (shared by cuda and rocm)
    dropin.write_text(
        dropin.read_text().replace(
            'wheel_suffixes = ["cu130", "rocm7.1", "rocm7.2", "rocm7.14.1"]', 'wheel_suffixes = ["cu130", "rocm9.9"]'
        )
    )
    text = (recipes_copy / "torch.toml").read_text()
    (recipes_copy / "torch.toml").write_text(
        text.replace('wheel_suffixes = ["rocm6.1", "rocm6.2.4"]', 'wheel_suffixes = ["rocm6.1"]')
    )
    recipes = load(recipes_copy)
    assert _refusal(Request(accel_version="7.2", torch="2.11"), recipes).endswith(
        "torch 2.11 is offered as an official wheel only; releases whose index carries it: none"
    )
    assert _refusal(Request(accel_version="6.2.4", torch="2.5"), recipes).endswith("; use another release")


def test_a_given_base_image_gets_the_rocm_installer_only_when_asked():
    given = "registry.example/ubuntu:22.04"
    plain = resolve(Request(accel_version="6.2", torch="2.5", base_image=given))
    installed = resolve(Request(accel_version="6.2", torch="2.5", base_image=given, install_accel=True))
    assert (plain.base_image, plain.amdgpu_install) == (given, "")
    assert (installed.base_image, installed.amdgpu_install) == (given, "6.2.60200")


def test_the_wheels_triton_is_claimed_only_for_the_index_its_pin_was_read_from(recipes_copy):
    text = (recipes_copy / "torch.toml").read_text()
    (recipes_copy / "torch.toml").write_text(text.replace('compile_index = "rocm6.2.4"', 'compile_index = "rocm6.1"'))
    recipes = load(recipes_copy)
    assert resolve(Request(accel_version="6.1.2", torch="2.6"), recipes).wheel_triton["version"] == "3.2.0"
    assert resolve(Request(accel_version="6.2.4", torch="2.6"), recipes).wheel_triton is None  # an index after it
    assert resolve(Request(accel_version="6.2.4", torch="2.6")).wheel_triton["version"] == "3.2.0"
    assert resolve(Request(accel_version="6.1.2", torch="2.6")).wheel_triton is None  # an index before it


def test_no_triton_is_claimed_for_a_wheel_whose_pin_was_never_read(recipes_copy):
    """compile_version "" means not verified: the plan claims no Triton for the line's wheel, even on the index
    a peer once resolved it from."""
    text = (recipes_copy / "torch.toml").read_text()
    (recipes_copy / "torch.toml").write_text(text.replace('compile_version = "3.2.0"', 'compile_version = ""'))
    plan = resolve(Request(accel_version="6.2.4", torch="2.6"), load(recipes_copy))
    assert plan.torch_source == "wheel" and plan.wheel_triton is None and plan.pinned()["torch"]["wheel_pulls"] is None
