"""images/common/install_accel_wheels.sh, the pip-ROCm route's step, run for real with pip against a local PEP 503
index laid out as TheRock's: a `rocm` meta package whose extras select `rocm-sdk-libraries` and one
`rocm-sdk-device-<gfx>` per GPU (ROCm/TheRock RELEASES.md; the real index is not reachable here). The cell's arch's
device package goes in, no other arch's; device-all is refused before pip; the torch index alone is asked.
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

SCRIPT = IMAGES_DIR / "common" / "install_accel_wheels.sh"
VERSION = "7.14.0"
ARCHS = ("gfx942", "gfx950", "gfx90a")


def _wheel(index: Path, name: str, requires: list[str], version: str = VERSION) -> None:
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{dist}/__init__.py": "",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(
            f"Provides-Extra: {e}\n"
            for e in sorted({r.split("extra == ")[1].strip("'\"") for r in requires if "extra ==" in r})
        )
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: envbuild-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = (
        "".join(
            f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
            f"{len(text.encode())}\n"
            for path, text in files.items()
        )
        + f"{info}/RECORD,,\n"
    )
    folder = index / name
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(path, text)
    (folder / "index.html").write_text(
        f'<!DOCTYPE html>\n<html><body>\n<a href="{wheel.name}">{wheel.name}</a>\n</body></html>\n'
    )


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("simple")
    device = [f"rocm-sdk-device-{a}=={VERSION}; extra == 'device-{a}'" for a in ARCHS]
    every = [f"rocm-sdk-device-{a}=={VERSION}; extra == 'device-all'" for a in ARCHS]
    _wheel(
        root,
        "rocm",
        [f"rocm-sdk-core=={VERSION}", f"rocm-sdk-libraries=={VERSION}; extra == 'libraries'", *device, *every],
    )
    for name in ("rocm-sdk-core", "rocm-sdk-libraries", *(f"rocm-sdk-device-{a}" for a in ARCHS)):
        _wheel(root, name, [])
    return root.as_uri()


@pytest.fixture
def venv(tmp_path) -> Path:
    root = tmp_path / "venv"
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


def test_one_archs_device_package_goes_in_from_the_torch_index(venv, tmp_path, index):
    proc = _run(venv, tmp_path, ACCEL_REQUIREMENTS=f"rocm[libraries,device-gfx942]=={VERSION}", TORCH_INDEX_URL=index)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rocm = {name: version for name, version in _installed(venv).items() if name.startswith("rocm")}
    assert rocm == {
        "rocm": VERSION,
        "rocm-sdk-core": VERSION,
        "rocm-sdk-libraries": VERSION,
        "rocm-sdk-device-gfx942": VERSION,
    }
    assert f"rocm-sdk-device-gfx942=={VERSION}" in proc.stdout  # the step's log names what it installed


def test_device_all_is_refused_before_pip(venv, tmp_path, index):
    proc = _run(venv, tmp_path, ACCEL_REQUIREMENTS=f"rocm[libraries,device-all]=={VERSION}", TORCH_INDEX_URL=index)
    assert proc.returncode == 1 and "one arch's device package only" in proc.stderr
    assert not any(name.startswith("rocm") for name in _installed(venv))


def test_only_the_torch_index_is_asked(venv, tmp_path, index):
    """pip's configured index (PIP_INDEX_URL, PyPI by default, whose rocm-sdk* names are placeholders) is never
    asked: a `rocm` 7.14.1 that only it has is not found."""
    other = tmp_path / "placeholder"
    _wheel(other, "rocm", [], version="7.14.1")
    proc = _run(
        venv,
        tmp_path,
        ACCEL_REQUIREMENTS="rocm[libraries,device-gfx942]==7.14.1",
        TORCH_INDEX_URL=index,
        PIP_INDEX_URL=other.as_uri(),
    )
    assert proc.returncode != 0 and "No matching distribution found for rocm" in proc.stderr
    assert "rocm" not in _installed(venv)


@pytest.mark.parametrize(
    "env",
    [
        {"ACCEL_REQUIREMENTS": "rocm[libraries,device-gfx942]==7.14.0"},
        {"TORCH_INDEX_URL": "https://download.pytorch.org/whl/rocm7.14"},
    ],
)
def test_a_missing_setting_fails_the_step_before_pip(venv, tmp_path, env):
    proc = _run(venv, tmp_path, **env)
    assert proc.returncode == 1 and "envbuild:" in proc.stderr and "pip" not in proc.stdout.lower()
