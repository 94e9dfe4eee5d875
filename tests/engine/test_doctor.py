"""`envbuild doctor` against fake /sys, /proc, /dev and /etc trees."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.engine.doctor import HostView, gfx_name, host_record, kfd_gpus


def _write(root: Path, path: str, text: str) -> Path:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


def fake_gpu_host(
    root: Path,
    *,
    gpus: tuple[int, ...] = (90010, 90010),
    cmdline: str = "ro quiet",
    kernel: str = "5.15.0-119-generic",
    driver: str | None = "6.8.5",
) -> Path:
    """A host with the given GPUs (gfx_target_version each) in the KFD topology, devices and groups."""
    _write(root, "/proc/sys/kernel/osrelease", kernel + "\n")
    _write(root, "/proc/cmdline", cmdline + "\n")
    if driver:
        _write(root, "/sys/module/amdgpu/version", driver + "\n")
    _write(
        root,
        "/sys/class/kfd/kfd/topology/nodes/0/properties",
        "cpu_cores_count 64\nsimd_count 0\ngfx_target_version 0\n",
    )
    for i, target in enumerate(gpus, start=1):
        _write(
            root,
            f"/sys/class/kfd/kfd/topology/nodes/{i}/properties",
            f"cpu_cores_count 0\nsimd_count 416\ngfx_target_version {target}\ndrm_render_minor {127 + i}\n",
        )
        _write(root, f"/dev/dri/renderD{127 + i}", "")
    _write(root, "/dev/kfd", "")
    for node in [root / "dev/kfd", *(root / "dev/dri").glob("renderD*")]:
        node.chmod(0o660)
    gid = os.getgid()
    _write(root, "/etc/group", f"root:x:0:\nvideo:x:44:\nrender:x:{gid if gid else 109}:\n")
    return root


def checks(record: dict) -> dict[str, str]:
    return {c["name"]: c["status"] for c in record["checks"]}


@pytest.mark.parametrize(
    "target, name", [(90010, "gfx90a"), (90402, "gfx942"), (90008, "gfx908"), (110000, "gfx1100"), (100300, "gfx1030")]
)
def test_gfx_target_version_names(target, name):
    assert gfx_name(target) == name


def test_two_gpus_without_iommu_pt_warn(tmp_path):
    root = fake_gpu_host(tmp_path, cmdline="BOOT_IMAGE=/vmlinuz ro quiet")
    host = HostView(root=root, uid=0, groups=(0,), check_engine=False)
    record = host_record(host)
    assert checks(record) == {
        "kernel": "pass",
        "amdgpu_driver": "pass",
        "gpu_devices": "pass",
        "gpu_archs": "pass",
        "iommu": "warn",
        "rocm_userspace": "pass",
        "cells": "pass",
    }
    assert record["gpu_archs"] == ["gfx90a"] and record["amdgpu_version"] == "6.8.5"
    iommu = next(c for c in record["checks"] if c["name"] == "iommu")
    assert "iommu=pt" in iommu["hint"] and "rccl#1129" in iommu["detail"]
    assert record["status"] == "warn"


def test_iommu_pt_set_and_single_gpu_pass(tmp_path):
    multi = fake_gpu_host(tmp_path / "multi", cmdline="ro iommu=pt quiet")
    single = fake_gpu_host(tmp_path / "single", gpus=(90402,))
    for root in (multi, single):
        record = host_record(HostView(root=root, uid=0, groups=(0,), check_engine=False))
        assert checks(record)["iommu"] == "pass"
    assert [g.arch for g in kfd_gpus(HostView(root=single))] == ["gfx942"]
    assert [g.render_minor for g in kfd_gpus(HostView(root=multi))] == [128, 129]


def test_device_access_needs_group_membership(tmp_path):
    root = fake_gpu_host(tmp_path)
    outsider = HostView(root=root, uid=4242, groups=(4242,), check_engine=False)
    member = HostView(root=root, uid=4242, groups=(4242, (root / "dev/kfd").stat().st_gid), check_engine=False)
    denied = next(c for c in host_record(outsider)["checks"] if c["name"] == "gpu_devices")
    assert denied["status"] == "fail" and "usermod -aG" in denied["hint"] and "kfd" in denied["detail"]
    assert checks(host_record(member))["gpu_devices"] == "pass"


def test_unvalidated_kernel_and_in_tree_driver_warn(tmp_path):
    root = fake_gpu_host(tmp_path, kernel="6.18.2-custom", driver=None)
    (root / "sys/module/amdgpu").mkdir(parents=True)
    record = host_record(HostView(root=root, uid=0, groups=(0,), check_engine=False))
    assert checks(record)["kernel"] == "warn" and checks(record)["amdgpu_driver"] == "warn"


def test_gpu_host_missing_devices_fails_but_cpu_host_only_warns(tmp_path):
    broken = tmp_path / "broken"
    _write(broken, "/sys/module/amdgpu/version", "6.8.5\n")  # driver, but no /dev/kfd, no topology
    result = host_record(HostView(root=broken, uid=0, groups=(0,), check_engine=False))
    assert checks(result)["gpu_devices"] == "fail" and checks(result)["gpu_archs"] == "fail"
    assert result["status"] == "fail"
    cpu_only = tmp_path / "cpu"
    _write(cpu_only, "/proc/sys/kernel/osrelease", "5.15.0-1-generic\n")
    record = host_record(HostView(root=cpu_only, uid=0, groups=(0,), check_engine=False))
    assert record["status"] == "warn" and checks(record)["amdgpu_driver"] == "warn"
    rocm = host_record(HostView(root=cpu_only, uid=0, groups=(0,), check_engine=False), flavor="rocm")
    assert checks(rocm)["amdgpu_driver"] == "fail" and rocm["status"] == "fail"


def test_cli_json_and_exit_codes(tmp_path):
    root = fake_gpu_host(tmp_path / "ok", cmdline="ro iommu=pt")
    runner = CliRunner()
    ok = runner.invoke(main, ["doctor", "--json", "--no-engine", "--root", str(root)])
    assert ok.exit_code == 0, ok.output
    record = json.loads(ok.output)
    assert record["status"] == "pass" and len(record["gpus"]) == 2
    bad = runner.invoke(main, ["doctor", "--no-engine", "--flavor", "rocm", "--root", str(tmp_path)])
    assert bad.exit_code == 1 and "amdgpu" in bad.output and "fail" in bad.output


def test_cli_reports_missing_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such-docker.sock")
    result = CliRunner().invoke(main, ["doctor", "--json", "--root", str(fake_gpu_host(tmp_path / "h"))])
    record = json.loads(result.output)
    engine = next(c for c in record["checks"] if c["name"] == "docker_engine")
    assert result.exit_code == 1 and engine["status"] == "fail" and "no-such-docker.sock" in engine["detail"]


@pytest.mark.parametrize(
    "os_release,expected",
    [
        ('ID=debian\nVERSION_ID="12"\n', "apt-get install docker.io"),
        ('ID=pop\nID_LIKE="ubuntu debian"\n', "apt-get install docker.io"),
        ('ID="rocky"\nID_LIKE="rhel centos fedora"\n', "dnf install"),
        ("ID=arch\n", "your package manager"),
    ],
)
def test_the_missing_engine_hint_fits_the_os(tmp_path, os_release, expected):
    from builder.engine.docker import start_hint

    path = tmp_path / "os-release"
    path.write_text(os_release)
    hint = start_hint(path)
    assert expected in hint and "systemctl start docker" in hint and ".ci/" not in hint


def test_doctor_maps_the_host_gpus_to_the_cells_it_can_run(tmp_path):
    """An MI300X (gfx942) and an RX 9070 (gfx1201) host: each arch gets the releases whose recipes cover it (gfx1201
    only from 7.0), marked where AMD validated the host's kernel line; an arch no recipe covers is a warning."""
    root = fake_gpu_host(tmp_path, gpus=(90402, 120001), kernel="6.8.0-45-generic", cmdline="ro iommu=pt")
    record = host_record(HostView(root=root, uid=0, groups=(0,), check_engine=False))
    cells = record["runnable_cells"]
    assert set(cells) == {"gfx942", "gfx1201"}
    by_release = {c["rocm"]: c for c in cells["gfx942"]}
    assert by_release["7.2"]["torch"] == ["2.11", "2.12", "2.13", "2.14"]
    assert by_release["6.2"]["torch"] == ["2.3", "2.4", "2.5", "2.6"]  # 2.5 a wheel; 2.3, 2.4, 2.6 source builds
    assert by_release["7.14"]["torch"] == ["2.14"] and by_release["10.0"]["torch"] == ["2.13"]  # pip-ROCm releases
    assert by_release["7.14.1"]["torch"] == ["2.11"] and by_release["10.1"]["torch"] == ["2.14"]  # AMD's torch
    assert by_release["7.1"]["kernel_validated"] is True and by_release["6.1.2"]["kernel_validated"] is False
    assert by_release["7.2"]["kernel_validated"] is None  # 7.2's kernels were not read (recipes/rocm.toml)
    assert [c["rocm"] for c in cells["gfx1201"]] == ["7.0", "7.1", "7.2", "7.14", "7.14.1", "10.0", "10.1"]
    check = next(c for c in record["checks"] if c["name"] == "cells")
    assert check["status"] == "pass" and "gfx942 (MI300A, MI300X, MI325X): ROCm 6.1.2" in check["detail"]
    odd = host_record(
        HostView(root=fake_gpu_host(tmp_path / "b", gpus=(100100,)), uid=0, groups=(0,), check_engine=False)
    )
    assert odd["runnable_cells"] == {"gfx1010": []} and checks(odd)["cells"] == "warn"


def test_an_amd_host_is_shown_the_shortest_path_to_a_signed_result(tmp_path):
    """On a host with an AMD GPU the doctor ends with the commands that measure what its owner already has; on a
    host without one it does not (nothing there to measure on a GPU)."""
    runner = CliRunner()
    gpu = runner.invoke(main, ["doctor", "--no-engine", "--root", str(fake_gpu_host(tmp_path / "gpu"))])
    assert "envbuild run workload --image rocm/pytorch:TAG --gpus all --out run-gfx90a" in gpu.output
    assert "--apptainer PYTORCH.sif" in gpu.output and "envbuild matrix publish run-gfx90a/result.json" in gpu.output
    assert "--command '" in gpu.output  # publish refuses a result without the commands that made it
    (tmp_path / "cpu" / "proc").mkdir(parents=True)
    cpu = runner.invoke(main, ["doctor", "--no-engine", "--root", str(tmp_path / "cpu")])
    assert cpu.exit_code == 0 and "rocm/pytorch" not in cpu.output


def test_the_cells_a_host_can_run_come_from_the_site_folder_the_cli_was_given(tmp_path, monkeypatch):
    """`envbuild --recipes DIR doctor` lists a release the site's folder adds among the gfx90a host's cells;
    host_record without the folder does not, whatever ENVBUILD_RECIPES says."""
    from repo import REPO_ROOT

    packaged = (REPO_ROOT / "recipes" / "rocm.toml").read_text()
    start = packaged.index('[release."6.2"]')
    end = packaged.find("\n[", start + 1)
    site = tmp_path / "site"
    site.mkdir()
    (site / "rocm.toml").write_text(packaged[start:end].replace('[release."6.2"]', '[release."6.2.9"]') + "\n")
    root = fake_gpu_host(tmp_path / "host")
    monkeypatch.delenv("ENVBUILD_RECIPES", raising=False)
    result = CliRunner().invoke(main, ["--recipes", str(site), "doctor", "--root", str(root), "--json", "--no-engine"])
    releases = {c["rocm"] for c in json.loads(result.stdout)["runnable_cells"]["gfx90a"]}
    assert "6.2.9" in releases and "6.2" in releases, result.output
    monkeypatch.setenv("ENVBUILD_RECIPES", str(site))
    record = host_record(HostView(root=root, uid=0, groups=(0,), check_engine=False))
    assert "6.2.9" not in {c["rocm"] for c in record["runnable_cells"]["gfx90a"]}


DPKG_STATUS = """Package: amdrocm-runtime10.1
Status: install ok installed
Version: 10.1.0

Package: amdrocm-blas10.1
Status: install ok installed
Version: 10.1.0

Package: amdrocm-dnn10.1
Status: deinstall ok config-files
Version: 10.1.0

Package: rocm-core
Status: install ok installed
Version: 7.2.4.70204-1

Package: rocminfo-unrelated
Status: install ok installed
"""


def test_the_doctor_finds_rocm_under_core_and_under_opt_rocm_with_its_package_names(tmp_path):
    """A host with ROCm 10.1 in /opt/rocm/core-10.1 (TheRock's layout) beside a legacy /opt/rocm -> /opt/rocm-7.2.4:
    both prefixes are named with their versions, and the installed amdrocm-* packages and the legacy rocm-core (not the
    removed amdrocm-dnn, not a look-alike name) are counted; a host with none is told it needs none."""
    root = fake_gpu_host(tmp_path / "host", cmdline="ro iommu=pt")
    _write(root, "/opt/rocm/core-10.1/.info/version", "10.1.0\n")
    (root / "opt/rocm/core-10.1/lib").mkdir(parents=True)
    _write(root, "/opt/rocm-7.2.4/.info/version", "7.2.4-70204\n")
    (root / "opt/rocm-7.2.4/lib").mkdir(parents=True)
    (root / "opt/rocm/lib").symlink_to(root / "opt/rocm-7.2.4/lib")
    _write(root, "/var/lib/dpkg/status", DPKG_STATUS)
    record = host_record(HostView(root=root, uid=0, groups=(0,), check_engine=False))
    check = next(c for c in record["checks"] if c["name"] == "rocm_userspace")
    assert check["status"] == "pass"
    assert check["detail"] == (
        "/opt/rocm/core-10.1 (10.1.0, TheRock layout); /opt/rocm (7.2.4-70204, legacy); "
        "2 amdrocm-* packages (amdrocm-blas10.1, amdrocm-runtime10.1); legacy packages (rocm-core)"
    )
    bare = host_record(HostView(root=fake_gpu_host(tmp_path / "bare"), uid=0, groups=(0,), check_engine=False))
    detail = next(c["detail"] for c in bare["checks"] if c["name"] == "rocm_userspace")
    assert detail.startswith("none installed (not needed")
