"""Cell identity: keys are stable and results map back to the cell they were measured in."""

from builder.plan.cells import Cell


def test_key_names_every_coordinate_and_omits_absent_ones():
    rocm = Cell(flavor="rocm", accel_version="6.2", torch="2.4", arch="gfx90a", python="3.10")
    cpu = Cell(flavor="cpu", torch="2.13", python="3.11")
    assert rocm.key == "rocm6.2-torch2.4-gfx90a-py3.10"
    assert cpu.key == "cpu-torch2.13-py3.11"


def test_from_result_reads_rocm_versions_without_a_manifest():
    result = {
        "versions": {"python": "3.10.14", "torch": "2.4.1+rocm6.2", "hip": "6.2.41133-dd7f95766", "cuda": None},
        "hardware": {"arch": "gfx90a"},
    }
    assert Cell.from_result(result).key == "rocm6.2-torch2.4-gfx90a-py3.10"


def test_from_result_on_cpu_ignores_arch():
    result = {
        "versions": {"python": "3.11.7", "torch": "2.13.0+cpu", "hip": None, "cuda": None},
        "hardware": {"arch": None},
    }
    assert Cell.from_result(result) == Cell(flavor="cpu", torch="2.13", python="3.11")


def test_manifest_cell_wins_over_runtime_versions():
    """hip's version string carries no patch level, so an image's manifest is the authority (6.1.2, not 6.1)."""
    manifest_cell = {"flavor": "rocm", "accel_version": "6.1.2", "torch": "2.3", "arch": "gfx942", "python": "3.10"}
    result = {
        "versions": {"python": "3.10.12", "torch": "2.3.1", "hip": "6.1.40093-bd86f1708", "cuda": None},
        "hardware": {"arch": "gfx942"},
        "image": {"manifest": {"cell": manifest_cell}},
    }
    assert Cell.from_result(result).key == "rocm6.1.2-torch2.3-gfx942-py3.10"


def test_a_gpu_build_of_torch_that_ran_on_the_cpu_is_the_cpu_cell():
    """The cell follows the device that ran: a CUDA wheel on a machine without a GPU (what `pipx install` gives) and
    an envbuild ROCm image whose run fell back to the CPU are CPU measurements of those builds."""
    cpu = {"device_type": "cpu", "vendor": "cpu", "gpu_name": None, "arch": None, "gpu_count": 0}
    cuda_wheel = {
        "versions": {"python": "3.11.9", "torch": "2.14.1+cu130", "hip": None, "cuda": "13.0"},
        "hardware": cpu,
    }
    assert Cell.from_result(cuda_wheel).key == "cpu-torch2.14-py3.11"
    manifest_cell = {"flavor": "rocm", "accel_version": "6.2", "torch": "2.5", "arch": "gfx90a", "python": "3.10"}
    rocm_image = {
        "versions": {"python": "3.10.12", "torch": "2.5.1+rocm6.2", "hip": "6.2.41133", "cuda": None},
        "hardware": cpu,
        "image": {"manifest": {"cell": manifest_cell}},
    }
    assert Cell.from_result(rocm_image).key == "cpu-torch2.5-py3.10"
    # no hardware block (the container died before the workload looked): still the image's own cell
    assert Cell.from_result({**rocm_image, "hardware": None}).key == "rocm6.2-torch2.5-gfx90a-py3.10"
    # no manifest and no GPU arch read: never a GPU cell
    assert Cell.from_result({**cuda_wheel, "hardware": None}).key == "cpu-torch2.14-py3.11"
