"""The vendor-support column: only what the cited ROCm pages list, every claim with its source."""

from __future__ import annotations

import pytest

from builder.report import vendor_support
from builder.plan.cells import Cell


@pytest.mark.parametrize(
    "rocm, torch, arch, status",
    [
        ("6.2", "2.3", "gfx90a", "listed"),
        ("6.2", "2.4", "gfx90a", "not listed"),  # ROCm 6.2.x row lists PyTorch up to 2.3
        ("6.1.2", "2.1", "gfx1100", "listed"),
        ("6.1.2", "2.3", "gfx942", "not listed"),  # ROCm 6.1.x row: 1.13, 2.0, 2.1
        ("6.2", "2.3", "gfx1201", "not listed"),  # arch not on the system-requirements page
        ("6.3", "2.4", "gfx90a", "listed"),  # AMD's CSV (recipes/vendor/), columns 6.3.0-6.3.3
        ("6.3", "2.7", "gfx90a", "wheel only"),  # AMD lists 2.7 from 7.0.0 on; PyTorch ships 2.7.0+rocm6.3
        ("7.2", "2.11", "gfx942", "wheel only"),  # AMD's 7.2.x table lists 2.9.1, 2.8.0, 2.7.1
        ("7.1", "2.9", "gfx950", "listed"),  # AMD's 7.1.1 table: 2.9, 2.8, 2.7 and gfx950
        ("6.4", "2.6", "gfx950", "not listed"),  # gfx950 arrives in 7.0.0; no 2.6 wheel for rocm6.4
        ("5.7", "2.1", "gfx90a", "not listed"),  # no table at all for this release
    ],
)
def test_support_follows_the_cited_tables(rocm, torch, arch, status):
    data = vendor_support.load()
    support = vendor_support.support_of(
        Cell(flavor="rocm", accel_version=rocm, torch=torch, arch=arch, python="3.10"), data
    )
    assert support.status == status, support.detail
    if rocm in data["rocm"]:
        assert support.sources and all(url.startswith("https://rocm.docs.amd.com/") for url in support.sources)
    elif data["amd"].get(rocm):
        assert support.sources and all(url.startswith("https://github.com/ROCm/") for url in support.sources)
    assert ("PyTorch: official wheel torch" in support.detail) == (
        status == "wheel only" or "official wheel" in support.detail
    )


def test_a_cell_with_an_official_wheel_says_what_amd_and_pytorch_each_claim():
    data = vendor_support.load()
    support = vendor_support.support_of(
        Cell(flavor="rocm", accel_version="7.2", torch="2.11", arch="gfx942", python="3.12"), data
    )
    assert "PyTorch: official wheel torch 2.11.0+rocm7.2" in support.detail
    assert "AMD's table for ROCm 7.2.2, 7.2.4 does not list PyTorch 2.11 (listed: 2.7, 2.8, 2.9)" in support.detail


def test_amds_csv_copy_parses_into_point_releases(tmp_path):
    """The committed copy of AMD's CSV gives each point release its Ubuntu lines, GPU targets and PyTorch lines; a
    file of another shape is refused rather than read as empty."""
    from builder.plan import vendor_matrix

    points = vendor_matrix.load()
    assert points["6.2.4"].archs == ["gfx1100", "gfx1030", "gfx942", "gfx90a", "gfx908"]
    assert points["6.2.4"].pytorch == ["2.3", "2.2", "2.1", "2.0", "1.13"] and "22.04.5" in points["6.2.4"].ubuntu
    assert "22.04" not in points["6.2.0"].ubuntu and "24.04" in points["6.2.0"].ubuntu
    assert points["6.1.2"].ubuntu == ["22.04.4", "22.04.3", "20.04.6", "20.04.5"]
    assert "gfx950" in points["7.0.0"].archs and "gfx950" not in points["6.4.3"].archs
    (tmp_path / vendor_matrix.HISTORICAL).write_text("Version,6.0\n")
    (tmp_path / vendor_matrix.CURRENT).write_text("release,field,value,table\n")
    with pytest.raises(vendor_matrix.VendorMatrixError, match="ROCm Version"):
        vendor_matrix.load(tmp_path)


def test_cpu_cells_get_no_vendor_claim():
    support = vendor_support.support_of(Cell(flavor="cpu", torch="2.13", python="3.11"), vendor_support.load())
    assert support.status == "n/a" and not support.sources


def test_every_release_in_the_data_file_cites_its_sources():
    for release, entry in vendor_support.load()["rocm"].items():
        assert entry["pytorch"] and entry["archs"], release
        assert entry["pytorch_source"].startswith("https://rocm.docs.amd.com/"), release
        assert entry["archs_source"].startswith("https://rocm.docs.amd.com/"), release
