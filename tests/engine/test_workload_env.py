"""The managed workload environment of `run workload --local` (builder.engine.accelerator, builder.plan.torch_choice,
builder.engine.workload_env): which torch a host gets, read from the real recipes, and what uv installs from which
index, for real, against local PEP 503 indexes of stand-in wheels (the PyTorch and AMD indexes are not reachable
here). A stand-in `rocm_agent_enumerator` on PATH plays an AMD host, a fake /sys an NVIDIA one. The CPU case with the
real CPU wheel: tests/integration/test_installed_tool.py."""

from __future__ import annotations

import dataclasses
import glob
import importlib.metadata
import os
import shutil
from pathlib import Path

import pytest

from builder.engine import accelerator, workload_env
from builder.engine.doctor import HostView
from builder.plan import recipes, torch_choice
from standin_index import sha256, simple_index, wheel
from tests.engine.test_doctor import fake_gpu_host

RECIPES = recipes.load()


def _enumerator(folder: Path, *lines: str) -> str:
    """A PATH holding a stand-in rocm_agent_enumerator that prints `lines` (gfx000 is the CPU agent)."""
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / "rocm_agent_enumerator"
    tool.write_text("#!/bin/sh\n" + "".join(f"echo {line}\n" for line in lines))
    tool.chmod(0o755)
    return f"{folder}:/usr/bin:/bin"


@pytest.mark.parametrize(
    "lines, arch",
    [(("gfx000", "gfx90a", "gfx90a"), "gfx90a"), (("gfx000", "gfx1151"), "gfx1151"), (("gfx000",), None)],
)
def test_an_amd_gpu_is_read_from_rocm_agent_enumerator(tmp_path, lines, arch):
    found = accelerator.detect(HostView(), {"PATH": _enumerator(tmp_path / "bin", *lines)})
    assert (found.kind, found.arch) == (("rocm", arch) if arch else ("cpu", None))
    assert "rocm_agent_enumerator" in found.seen or arch is None


def test_without_the_enumerator_the_kfd_topology_names_the_gpu(tmp_path):
    """A host with the amdgpu driver and no ROCm userspace (the pip-ROCm route's hosts): the doctor's KFD read."""
    host = HostView(root=fake_gpu_host(tmp_path / "root", gpus=(90402, 90402)))
    found = accelerator.detect(host, {"PATH": "/usr/bin:/bin"})
    assert (found.kind, found.arch) == ("rocm", "gfx942") and "KFD topology" in found.seen


@pytest.mark.parametrize(
    "path, text, driver",
    [
        ("/sys/module/nvidia/version", "580.95.05\n", "580.95.05"),
        (
            "/proc/driver/nvidia/version",
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.144.03  Release Build  (dvs-builder)\n",
            "550.144.03",
        ),
    ],
)
def test_an_nvidia_driver_is_read_as_uv_reads_it(tmp_path, path, text, driver):
    target = tmp_path / path.lstrip("/")
    target.parent.mkdir(parents=True)
    target.write_text(text)
    found = accelerator.detect(HostView(root=tmp_path), {})
    assert (found.kind, found.driver) == ("cuda", driver)


def test_the_backend_variable_forces_the_cpu_or_a_route_and_refuses_the_rest(tmp_path):
    path = _enumerator(tmp_path / "bin", "gfx90a")
    assert accelerator.detect(HostView(), {"PATH": path, "ENVBUILD_TORCH_BACKEND": "cpu"}).kind == "cpu"
    forced = accelerator.detect(HostView(), {"PATH": path, "ENVBUILD_TORCH_BACKEND": "rocm7.14"})
    assert (forced.kind, forced.arch, forced.release) == ("rocm", "gfx90a", "7.14")
    with pytest.raises(accelerator.BackendError, match="not a cuda GPU"):
        accelerator.detect(HostView(), {"PATH": path, "ENVBUILD_TORCH_BACKEND": "cuda13.0"})
    with pytest.raises(accelerator.BackendError, match="is no torch backend"):
        accelerator.detect(HostView(), {"PATH": path, "ENVBUILD_TORCH_BACKEND": "rocm; rm -rf /"})


@pytest.mark.parametrize(
    "kind, arch, release, cell, requirement, index, accel",
    [
        ("cpu", None, None, "cpu-torch2.13-py3.11", "torch==2.13.0+cpu", "https://download.pytorch.org/whl/cpu", ()),
        (
            "rocm",
            "gfx90a",
            None,
            "rocm7.2-torch2.14-gfx90a-py3.12",
            "torch==2.14.0+rocm7.2",
            "https://download.pytorch.org/whl/rocm7.2",
            (),
        ),
        (
            "rocm",
            "gfx1151",
            None,
            "rocm7.14-torch2.14-gfx1151-py3.12",
            "torch==2.14.0+rocm7.14",
            "https://download.pytorch.org/whl/rocm7.14",
            ("rocm[libraries,device-gfx1151]==7.14.0",),
        ),
        (
            "rocm",
            "gfx1151",
            "10.0",
            "rocm10.0-torch2.13-gfx1151-py3.12",
            "torch==2.13.0+rocm10.0.0",
            "https://stable.repo.amd.com/rocm/whl-next/",
            ("rocm[libraries,device-gfx1151]==10.0.0", "amd-torch-device-gfx1151==2.13.0+rocm10.0.0"),
        ),
        (
            "cuda",
            None,
            None,
            "cuda13.0-torch2.11-sm_90-py3.12",
            "torch==2.11.0+cu130",
            "https://download.pytorch.org/whl/cu130",
            (),
        ),
    ],
)
def test_each_host_gets_its_recipe_cells_torch(kind, arch, release, cell, requirement, index, accel):
    """The newest torch line with an official wheel for the host (PyTorch's index before the pip-ROCm route: gfx90a
    gets rocm7.2, gfx1151 only has TheRock's), the cell's lock, the CPU wheels' recorded sha256."""
    choice = torch_choice.choose(RECIPES, kind, arch, "3.11", release)
    assert (choice.cell, choice.torch_requirement, choice.index_url, choice.accel_requirements) == (
        cell,
        requirement,
        index,
        accel,
    )
    assert choice.lock == f"torch{cell.split('-torch')[1].split('-')[0]}-py{choice.python}"
    assert "\ntorch==" not in "\n" + choice.stack and "transformers==" in choice.stack
    assert not any(f"\n{name}==" in "\n" + choice.stack for name in choice.from_torch_index)
    if kind == "cpu":
        assert "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b" in choice.torch_hashes
    else:
        assert choice.torch_hashes == ()  # none recorded: installed by exact version from its index


def test_an_arch_no_recipe_knows_is_told_what_to_do_instead():
    with pytest.raises(torch_choice.NoTorchForHost, match="gfx906.*--venv PATH"):
        torch_choice.choose(RECIPES, "rocm", "gfx906", "3.11")


# --- what uv installs, from which index ------------------------------------------------------------------------------


@pytest.fixture
def python312(tmp_path) -> str:
    """A PATH whose python3.12 is a real CPython 3.12 (the ROCm and CUDA cells' Python)."""
    found = shutil.which("python3.12", path="/usr/bin:/usr/local/bin") or next(
        iter(sorted(glob.glob("/root/.pyenv/versions/3.12*/bin/python3.12"))), None
    )
    if not found:
        pytest.skip("no CPython 3.12 on this machine")
    folder = tmp_path / "py312"
    folder.mkdir()
    (folder / "python3.12").symlink_to(found)
    return str(folder)


def _environ(tmp_path: Path, path: str, torch_index: str, stack_index: str, **more: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("UV_", "ENVBUILD_", "PIP_"))},
        "PATH": f"{path}:/usr/bin:/bin",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_INDEX_URL": stack_index,  # the user's own indexes: the stack comes from them, torch never
        "UV_EXTRA_INDEX_URL": stack_index,
        "ENVBUILD_TORCH_INDEX_URL": torch_index,
        **more,
    }


def _installed(env: workload_env.ManagedEnv) -> dict[str, tuple[str, str]]:
    """{distribution: (version, the ORIGIN file of its stand-in package)} of the environment."""
    site = next(env.root.glob("lib/python3*/site-packages"))
    found = {}
    for dist in importlib.metadata.distributions(path=[str(site)]):
        name = dist.metadata["Name"]
        origin = site / name.replace("-", "_") / "ORIGIN"
        found[name] = (dist.version, origin.read_text() if origin.is_file() else "")
    return found


@pytest.fixture
def stack(tmp_path) -> tuple[str, str]:
    """(the stand-in stack's index URL, its hash-checked requirements): filelock, and a decoy torch of every version
    the cases ask for (an index other than torch's must never give torch)."""
    folder = tmp_path / "stack-wheels"
    lock = wheel(folder, "filelock", "99.0.0", origin="stack index")
    decoys = [
        wheel(folder, "torch", version, origin="DECOY")
        for version in ("2.14.0+rocm7.2", "2.14.0+rocm7.14", "2.13.0+rocm10.0.0", "2.11.0+cu130")
    ]
    index = simple_index(tmp_path / "stack-index", [lock, *decoys])
    return index, f"filelock==99.0.0 \\\n    --hash=sha256:{sha256(lock)}\n"


def _torch_index(tmp_path: Path, torch_version: str, requires: tuple[str, ...], *more: tuple) -> str:
    folder = tmp_path / "torch-wheels"
    wheels = [wheel(folder, "torch", torch_version, ("filelock", *requires), origin="torch index")]
    wheels += [wheel(folder, name, version, reqs, origin="torch index") for name, version, reqs in more]
    return simple_index(tmp_path / "torch-index", wheels)


def test_an_amd_host_gets_the_rocm_wheel_for_its_arch_from_the_torch_index(tmp_path, python312, stack):
    """gfx90a: torch 2.14.0+rocm7.2 from the (mirrored) PyTorch index, triton-rocm, which only that index has, after
    it; the locked stack from the user's index. The stack index's decoy torch is never taken."""
    path = _enumerator(tmp_path / "bin", "gfx000", "gfx90a")
    found = accelerator.detect(HostView(), {"PATH": path})
    choice = torch_choice.choose(RECIPES, found.kind, found.arch, "3.11", found.release)
    index = _torch_index(tmp_path, "2.14.0+rocm7.2", ("triton-rocm==3.9.0",), ("triton-rocm", "3.9.0", ()))
    lines: list[str] = []
    env = workload_env.ensure(
        dataclasses.replace(choice, stack=stack[1]),
        lines.append,
        _environ(tmp_path, f"{path}:{python312}", index, stack[0]),
    )
    installed = _installed(env)
    assert installed["torch"] == ("2.14.0+rocm7.2", "torch index")
    assert installed["triton-rocm"] == ("3.9.0", "torch index") and installed["filelock"] == ("99.0.0", "stack index")
    assert env.python_version.startswith("3.12.") and env.made and env.from_mirror
    assert env.record()["cell"] == "rocm7.2-torch2.14-gfx90a-py3.12" and env.record()["torch_sha256"] == "unhashed"
    assert any("from torch's index: triton-rocm==3.9.0" in line for line in lines)
    again = workload_env.ensure(
        dataclasses.replace(choice, stack=stack[1]),
        lines.append,
        _environ(tmp_path, f"{path}:{python312}", index, stack[0]),
    )
    assert not again.made and again.root == env.root  # cached per cell and what it is made from


def test_the_pip_rocm_route_installs_one_archs_device_wheels(tmp_path, python312, stack):
    """gfx1151 (TheRock only): rocm[libraries,device-gfx1151] from the torch index first, then torch without its
    dependencies: its own `rocm[libraries,device-all]` requirement is met by the name and never pulls every arch."""
    path = _enumerator(tmp_path / "bin", "gfx1151")
    found = accelerator.detect(HostView(), {"PATH": path})
    choice = torch_choice.choose(RECIPES, found.kind, found.arch, "3.11", found.release)
    archs = ("gfx1151", "gfx942", "gfx90a")
    device = [f"rocm-sdk-device-{a}==7.14.0; extra == 'device-{a}'" for a in archs]
    every = [f"rocm-sdk-device-{a}==7.14.0; extra == 'device-all'" for a in archs]
    rocm = (
        "rocm",
        "7.14.0",
        ("rocm-sdk-core==7.14.0", "rocm-sdk-libraries==7.14.0; extra == 'libraries'", *device, *every),
    )
    sdk = [(n, "7.14.0", ()) for n in ("rocm-sdk-core", "rocm-sdk-libraries", *(f"rocm-sdk-device-{a}" for a in archs))]
    index = _torch_index(tmp_path, "2.14.0+rocm7.14", ("rocm[libraries,device-all]==7.14.0",), rocm, *sdk)
    env = workload_env.ensure(
        dataclasses.replace(choice, stack=stack[1]),
        lambda _: None,
        _environ(tmp_path, f"{path}:{python312}", index, stack[0]),
    )
    installed = _installed(env)
    assert installed["torch"] == ("2.14.0+rocm7.14", "torch index")
    devices = sorted(name for name in installed if name.startswith("rocm-sdk-device-"))
    assert devices == ["rocm-sdk-device-gfx1151"] and {"rocm", "rocm-sdk-core", "rocm-sdk-libraries"} <= set(installed)


def test_rocm_10_takes_amds_split_torch_of_the_arch(tmp_path, python312, stack):
    """ENVBUILD_TORCH_BACKEND=rocm10.0: AMD's index, torch 2.13.0+rocm10.0.0 and amd-torch-device-gfx1151."""
    path = _enumerator(tmp_path / "bin", "gfx1151")
    found = accelerator.detect(HostView(), {"PATH": path, "ENVBUILD_TORCH_BACKEND": "rocm10.0"})
    choice = torch_choice.choose(RECIPES, found.kind, found.arch, "3.11", found.release)
    rocm = ("rocm", "10.0.0", ("rocm-sdk-core==10.0.0", "rocm-sdk-device-gfx1151==10.0.0; extra == 'device-gfx1151'"))
    more = [(n, "10.0.0", ()) for n in ("rocm-sdk-core", "rocm-sdk-device-gfx1151")]
    split = ("amd-torch-device-gfx1151", "2.13.0+rocm10.0.0", ("rocm-sdk-device-gfx1151==10.0.0",))
    index = _torch_index(tmp_path, "2.13.0+rocm10.0.0", (), rocm, split, *more)
    env = workload_env.ensure(
        dataclasses.replace(choice, stack=stack[1]),
        lambda _: None,
        _environ(tmp_path, f"{path}:{python312}", index, stack[0]),
    )
    installed = _installed(env)
    assert installed["torch"] == ("2.13.0+rocm10.0.0", "torch index")
    assert installed["amd-torch-device-gfx1151"][0] == "2.13.0+rocm10.0.0" and "rocm-sdk-device-gfx1151" in installed


def test_an_nvidia_host_gets_the_cuda_wheel_and_its_runtime_from_the_torch_index(tmp_path, python312, stack):
    root = tmp_path / "root"
    (root / "sys/module/nvidia").mkdir(parents=True)
    (root / "sys/module/nvidia/version").write_text("580.95.05\n")
    found = accelerator.detect(HostView(root=root), {})
    choice = torch_choice.choose(RECIPES, found.kind, found.arch, "3.11", found.release)
    index = _torch_index(tmp_path, "2.11.0+cu130", ("nvidia-cublas==13.1.0",), ("nvidia-cublas", "13.1.0", ()))
    env = workload_env.ensure(
        dataclasses.replace(choice, stack=stack[1]), lambda _: None, _environ(tmp_path, python312, index, stack[0])
    )
    installed = _installed(env)
    assert installed["torch"] == ("2.11.0+cu130", "torch index") and installed["nvidia-cublas"][1] == "torch index"


def test_a_cpu_wheel_whose_sha256_is_not_recorded_is_refused_and_nothing_is_cached(tmp_path):
    """A mirror that serves other bytes under the CPU wheel's name: uv's hash check refuses it, exit 2 naming the
    index and the mirror variable, and no half-made environment stays in the cache."""
    choice = torch_choice.choose(RECIPES, "cpu", None, "3.11")
    fake = tmp_path / "mirror"
    real = wheel(tmp_path / "build", "torch", "2.13.0+cpu", origin="not the index's file")
    fake.mkdir()
    shutil.copy(real, fake / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    environ = _environ(tmp_path, "", str(fake), "https://pypi.org/simple")
    with pytest.raises(workload_env.WorkloadEnvError, match=r"torch failed .*ENVBUILD_TORCH_INDEX_URL") as refused:
        workload_env.ensure(choice, lambda _: None, environ)
    assert "hash" in str(refused.value).lower()
    assert not (tmp_path / "cache" / "envbuild" / "workload-envs" / choice.folder_name).exists()


def test_a_mirror_must_be_a_url_or_a_folder():
    with pytest.raises(workload_env.WorkloadEnvError, match="ENVBUILD_TORCH_INDEX_URL"):
        workload_env.mirror({"ENVBUILD_TORCH_INDEX_URL": "pytorch.org/whl/cpu --trusted-host evil"})
    assert workload_env.mirror({"ENVBUILD_TORCH_INDEX_URL": "/srv/wheels"}) == "/srv/wheels"


def test_an_unwritable_cache_is_bad_input_naming_the_variable(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))
    choice = torch_choice.choose(RECIPES, "cpu", None, "3.11")
    with pytest.raises(workload_env.WorkloadEnvError, match="set XDG_CACHE_HOME"):
        workload_env.ensure(choice)
