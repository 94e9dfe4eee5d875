"""images/common/install_torch_compile.sh, the torch-compile stage's step (source cells' pytorch-triton-rocm),
run for real with pip against a local PEP 503 index holding two versions of a stand-in `pytorch-triton-rocm`
wheel (the PyTorch index itself is not reachable here): the pinned version goes in, its requirements do not
(--no-deps), an index without the pin fails the step, and so do missing settings.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from builder.paths import IMAGES_DIR

SCRIPT = IMAGES_DIR / "common" / "install_torch_compile.sh"


def _wheel(directory: Path, version: str) -> None:
    """A pytorch-triton-rocm wheel with a `triton` package that requires filelock (as a real one may)."""
    info = f"pytorch_triton_rocm-{version}.dist-info"
    files = {
        "triton/__init__.py": f"__version__ = '{version}'\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: pytorch-triton-rocm\nVersion: {version}\n"
        "Requires-Dist: filelock\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: envbuild-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = (
        "".join(
            f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
            f"{len(text.encode())}\n"
            for name, text in files.items()
        )
        + f"{info}/RECORD,,\n"
    )
    with zipfile.ZipFile(directory / f"pytorch_triton_rocm-{version}-py3-none-any.whl", "w") as archive:
        for name, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(name, text)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=300)
    return root


def _run(venv: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), **env}
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=environment, timeout=300)


def _installed(venv: Path) -> dict[str, str]:
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(line.split("==") for line in out.split())


def test_the_pinned_backend_goes_in_from_the_torch_index_without_its_requirements(venv, tmp_path):
    index = tmp_path / "simple" / "pytorch-triton-rocm"
    index.mkdir(parents=True)
    for version in ("3.0.0", "3.1.0"):
        _wheel(index, version)
    links = "".join(f'<a href="{w.name}">{w.name}</a>\n' for w in sorted(index.glob("*.whl")))
    (index / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")  # PEP 503
    url = (tmp_path / "simple").as_uri()
    proc = _run(venv, tmp_path, TORCH_COMPILE_PACKAGE="pytorch-triton-rocm==3.0.0", TORCH_INDEX_URL=url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pytorch-triton-rocm 3.0.0" in proc.stdout
    installed = _installed(venv)
    assert installed["pytorch-triton-rocm"] == "3.0.0" and "filelock" not in installed  # --no-deps
    imported = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import triton; print(triton.__version__)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert imported.strip() == "3.0.0"

    # a version only PyPI has (its pytorch-triton-rocm stops at 2.1.0) is not found: the step asks the torch
    # index alone (--index-url), so PyPI's build can never stand in for the pinned one
    proc = _run(venv, tmp_path, TORCH_COMPILE_PACKAGE="pytorch-triton-rocm==2.1.0", TORCH_INDEX_URL=url)
    assert proc.returncode != 0 and "No matching distribution found for pytorch-triton-rocm==2.1.0" in proc.stderr


@pytest.mark.parametrize(
    "env",
    [
        {"TORCH_COMPILE_PACKAGE": "pytorch-triton-rocm==3.0.0"},
        {"TORCH_INDEX_URL": "https://download.pytorch.org/whl/rocm6.1"},
    ],
)
def test_a_missing_setting_fails_the_step_before_pip(venv, tmp_path, env):
    proc = _run(venv, tmp_path, **env)
    assert proc.returncode == 1 and "must both be set" in proc.stderr
    assert "pip" not in proc.stdout.lower()
