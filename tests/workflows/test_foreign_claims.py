"""What an image envbuild did not build says about its run meets what the host checked itself: a GPU claim needs
that kind of device passed into the container, the host to see such a GPU (and, for AMD, that arch), and the
versions the probe read; any disagreement is exit 2 naming both sides. A CPU result of a GPU build passes as what
it is."""

from __future__ import annotations

import copy

import pytest

from matrix_fixtures import make_result

from builder.plan.cells import Cell
from builder.workflows.run_identity import IdentityMismatch, check_foreign_claims

CPU = {"device_type": "cpu", "vendor": "cpu", "gpu_name": None, "arch": None, "gpu_count": 0, "peak_tflops": None}


def _foreign(devices: str, amd=(), nvidia=(), **hardware) -> dict:
    result = make_result()  # versions: torch 2.4.1+rocm6.2, hip 6.2.41133-dd7f95766, Python 3.10.14; gfx90a, 1 GPU
    result["hardware"].update(hardware)
    result["image"] = {
        "tag": "x:1",
        "origin": "foreign",
        "probe": {
            "python": "3.10.14",
            "torch": "2.4.1+rocm6.2",
            "torch_hip": "6.2.41133-dd7f95766",
            "torch_cuda": None,
        },
        "checked": {
            "by_host": {"devices_passed": devices, "gpus_seen": {"amd": list(amd), "nvidia": list(nvidia)}},
            "from_image_only": ["versions"],
        },
    }
    return result


@pytest.mark.parametrize(
    ("result", "says"),
    [
        (_foreign("none"), "passed no GPU into the container (this host sees no GPU"),
        (_foreign("none", amd=["gfx90a"]), "passed no GPU into the container (this host sees AMD gfx90a)"),
        (
            _foreign("rocm", amd=["gfx942"]),
            "amd GPU gfx90a (AMD Instinct MI250X, 1 of them), but this host sees AMD gfx942",
        ),
        (_foreign("rocm", amd=["gfx90a"], gpu_count=2), "2 of them), but this host sees AMD gfx90a"),
        (_foreign("cuda", nvidia=["NVIDIA H100"]), "but envbuild passed cuda devices"),
        (_foreign("cuda", vendor="nvidia", arch="sm_90"), "but this host sees no GPU"),
        (_foreign("none", **{**CPU, "gpu_name": "AMD Instinct MI250X"}), "passed no GPU"),
    ],
)
def test_a_gpu_claim_the_host_did_not_see_or_give_is_exit_2_naming_both_sides(result, says):
    with pytest.raises(IdentityMismatch) as raised:
        check_foreign_claims(result, "/out")
    assert says in str(raised.value) and "Nothing was recorded" in str(raised.value)


def test_versions_other_than_the_probe_read_are_exit_2():
    result = _foreign("none", **CPU)
    result["versions"]["torch"] = "2.5.0+rocm6.2"
    with pytest.raises(IdentityMismatch, match="names torch 2.5.0\\+rocm6.2, its probe read 2.4.1\\+rocm6.2"):
        check_foreign_claims(result, "/out")


def test_what_the_host_confirms_passes_and_names_its_cell():
    seen = _foreign("rocm", amd=["gfx90a", "gfx90a"], gpu_count=2)
    check_foreign_claims(seen, "/out")
    assert Cell.from_result(seen).key == "rocm6.2-torch2.4-gfx90a-py3.10"
    cpu = _foreign("none", **CPU)  # a ROCm build measured on the CPU: a CPU measurement of that build
    check_foreign_claims(cpu, "/out")
    assert Cell.from_result(cpu).key == "cpu-torch2.4-py3.10"
    nvidia = _foreign("cuda", nvidia=["NVIDIA H100 80GB HBM3"], vendor="nvidia", arch="sm_90")
    nvidia["versions"].update(hip=None, cuda="12.4", torch="2.4.1+cu124")
    nvidia["image"]["probe"].update(torch_hip=None, torch_cuda="12.4", torch="2.4.1+cu124")
    check_foreign_claims(nvidia, "/out")


def test_a_result_of_envbuild_s_own_image_is_not_checked_here():
    own = copy.deepcopy(make_result())
    own["image"] = {"tag": "envbuild/x:1", "manifest": {"cell": {}}}
    check_foreign_claims(own, "/out")
