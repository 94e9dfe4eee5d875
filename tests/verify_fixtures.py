"""verify_image.py run as the image runs it, on a stand-in ROCm torch (tests/integration/test_verify_image.py,
tests/integration/test_rocm_libs_debian.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from builder.paths import IMAGES_DIR

VERIFY = IMAGES_DIR / "common" / "verify_image.py"
REPO = Path(__file__).resolve().parent.parent


def run_verify(
    tmp_path: Path, expect: dict, pythonpath: Path | None = None, isolated: bool = False, env: dict | None = None
) -> tuple[int, str, dict]:
    """Run verify_image.py as the image does: beside this checkout's workload/ (/opt/envbuild in the image, so
    `import workload` finds it next to the script); `isolated`: without this interpreter's site-packages (-S),
    so only `pythonpath`'s distributions are installed; `env`: more environment (ROCM_PATH)."""
    (tmp_path / "expect.json").write_text(json.dumps(expect))
    opt = tmp_path / "opt-envbuild"
    if not opt.is_dir():
        opt.mkdir()
        shutil.copy(VERIFY, opt / VERIFY.name)
        os.symlink(REPO / "workload", opt / "workload")
    env = {"PATH": "/usr/bin:/bin"} | ({"PYTHONPATH": f"{pythonpath}"} if pythonpath else {}) | (env or {})
    python = [sys.executable, "-S"] if isolated else [sys.executable]
    proc = subprocess.run(
        [*python, str(opt / VERIFY.name), str(tmp_path / "expect.json"), str(tmp_path / "out.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    out = tmp_path / "out.json"
    assert out.is_file(), (
        f"verify_image.py exited {proc.returncode} without out.json:\n{(proc.stdout + proc.stderr)[-3000:]}"
    )
    return proc.returncode, proc.stdout + proc.stderr, json.loads(out.read_text())


def stand_in_torch(
    root: Path,
    *,
    hip: str = "6.2.41133-dd7f95766",
    flags: str | None = "gfx90a gfx942",
    torch_requires: tuple[str, ...] = (),
    others: tuple[tuple[str, str], ...] = (),
) -> Path:
    """A torch 2.4.1+rocm6.2 stand-in (module + dist-info from a file) and a locally built sentencepiece."""
    pkg = root / "torch"
    (pkg / "cuda").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "import types\n__version__ = '2.4.1+rocm6.2'\n"
        f"version = types.SimpleNamespace(hip={hip!r}, cuda=None)\n"
        f"_C = types.SimpleNamespace(_cuda_getArchFlags=lambda: {flags!r})\nfrom . import cuda\n"
    )
    (pkg / "cuda" / "__init__.py").write_text(
        "def is_available():\n    return False\n\ndef get_arch_list():\n    return []  # torch 2.3-2.6 without a GPU\n"
    )
    for name, version, tag in [
        ("torch", "2.4.1+rocm6.2", "cp311-cp311-linux_x86_64"),
        ("sentencepiece", "0.2.0", "cp311-cp311-linux_x86_64"),
        *((n, v, "py3-none-any") for n, v in others),
    ]:
        info = root / f"{name.replace('-', '_')}-{version}.dist-info"  # as pip names it (pytorch_triton_rocm)
        info.mkdir()
        requires = "".join(f"Requires-Dist: {r}\n" for r in torch_requires) if name == "torch" else ""
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires}")
        (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nTag: {tag}\n")
        (info / "direct_url.json").write_text(
            json.dumps({"url": f"file:///dist/{name}-{version}.whl", "archive_info": {}})
        )
    return root


def rocm_expect(arch: str = "gfx90a") -> dict:
    return {
        "cell": f"rocm6.2-torch2.4-{arch}-py3.11",
        "flavor": "rocm",
        "backend": "hip",
        "backend_version": "6.2",
        "arch": arch,
        "torch": {"version": "2.4.1+rocm6.2", "by_path": True},
        "sentencepiece": "0.2.0",
        "lock": {"sentencepiece": "0.2.0"},
    }
