"""The vendor-support column: only what the cited ROCm pages list, every claim with its source."""

from __future__ import annotations

import pytest

from builder.matrix import vendor_support
from builder.plan.cells import Cell


@pytest.mark.parametrize("rocm, torch, arch, status", [
    ("6.2", "2.3", "gfx90a", "listed"),
    ("6.2", "2.4", "gfx90a", "not listed"),      # ROCm 6.2.x row lists PyTorch up to 2.3
    ("6.1.2", "2.1", "gfx1100", "listed"),
    ("6.1.2", "2.3", "gfx942", "not listed"),    # ROCm 6.1.x row: 1.13, 2.0, 2.1
    ("6.2", "2.3", "gfx1201", "not listed"),     # arch not on the system-requirements page
    ("6.3", "2.4", "gfx90a", "not listed"),      # no cited data for this release
])
def test_support_follows_the_cited_tables(rocm, torch, arch, status):
    data = vendor_support.load()
    support = vendor_support.support_of(Cell(flavor="rocm", accel_version=rocm, torch=torch, arch=arch,
                                             python="3.10"), data)
    assert support.status == status, support.detail
    if rocm in data["rocm"]:
        assert support.sources and all(url.startswith("https://rocm.docs.amd.com/") for url in support.sources)


def test_cpu_cells_get_no_vendor_claim():
    support = vendor_support.support_of(Cell(flavor="cpu", torch="2.13", python="3.11"), vendor_support.load())
    assert support.status == "n/a" and not support.sources


def test_every_release_in_the_data_file_cites_its_sources():
    for release, entry in vendor_support.load()["rocm"].items():
        assert entry["pytorch"] and entry["archs"], release
        assert entry["pytorch_source"].startswith("https://rocm.docs.amd.com/"), release
        assert entry["archs_source"].startswith("https://rocm.docs.amd.com/"), release
