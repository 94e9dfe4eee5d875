"""images/common/verify_image.py, the check every image runs at the end of its build.

Two kinds of evidence: this interpreter's real installed packages (CPU torch 2.13 from pip, sentencepiece
from PyPI's binary wheel), which the verify step must accept or reject for the right reasons; and, for the
ROCm branch that needs a ROCm torch, a stand-in `torch` package on PYTHONPATH that reports exactly what the
torch 2.3-2.6 lines report without a visible GPU: `torch.cuda.get_arch_list()` returns [] (it checks
is_available() first) while `torch._C._cuda_getArchFlags()` returns the compiled list. The stand-in only
exercises verify's logic; the real ROCm torch check runs in ROCm image builds (not possible here).
The full step also runs for real at the end of every cpu-cell build (tests/test_build_cpu_cell.py).
"""

from __future__ import annotations

import importlib.metadata as md
import json
import shutil
import subprocess
import sys
from pathlib import Path

from builder.paths import IMAGES_DIR

VERIFY = IMAGES_DIR / "common" / "verify_image.py"


def _verify(tmp_path: Path, expect: dict, pythonpath: Path | None = None,
            isolated: bool = False) -> tuple[int, str, dict]:
    """Run verify_image.py; `isolated`: without this interpreter's site-packages (-S), so only `pythonpath`'s
    distributions are installed."""
    (tmp_path / "expect.json").write_text(json.dumps(expect))
    env = {"PATH": "/usr/bin:/bin"} | ({"PYTHONPATH": f"{pythonpath}"} if pythonpath else {})
    python = [sys.executable, "-S"] if isolated else [sys.executable]
    proc = subprocess.run([*python, str(VERIFY), str(tmp_path / "expect.json"), str(tmp_path / "out.json")],
                          capture_output=True, text=True, env=env, timeout=300)
    out = tmp_path / "out.json"
    assert out.is_file(), f"verify_image.py exited {proc.returncode} without out.json:\n{(proc.stdout + proc.stderr)[-3000:]}"
    return proc.returncode, proc.stdout + proc.stderr, json.loads(out.read_text())


def _host_expect(**changes) -> dict:
    expect = {"cell": "cpu-torch2.13-py3.11", "flavor": "cpu", "backend": "", "backend_version": None, "arch": None,
              "torch": {"version": md.version("torch"), "by_path": False},
              "sentencepiece": md.version("sentencepiece"),
              "lock": {"transformers": md.version("transformers"), "peft": md.version("peft")}}
    return expect | changes


def _failed(record: dict) -> list[str]:
    return [c["name"] for c in record["checks"] if not c["ok"]]


def test_real_environment_passes_torch_and_lock_and_rejects_a_binary_sentencepiece(tmp_path):
    code, out, record = _verify(tmp_path, _host_expect())
    assert code == 1 and not record["ok"]
    assert _failed(record) == ["sentencepiece built here"]  # PyPI's manylinux wheel, not built in the image
    assert "manylinux" in out and "verify: ok   torch version" in out


def test_a_wrong_pin_and_an_index_installed_torch_fail_with_what_was_found(tmp_path):
    lock = {"transformers": md.version("transformers"), "peft": "0.0.1"}
    code, out, record = _verify(tmp_path, _host_expect(lock=lock, torch={"version": "2.4.1+rocm6.2", "by_path": True}))
    assert code == 1
    assert {"torch version", "torch installed by path", "2 pins of the lock installed"} <= set(_failed(record))
    assert f"peft: pinned 0.0.1, installed {md.version('peft')}" in out
    assert f"expected 2.4.1+rocm6.2; metadata {md.version('torch')}" in out


def _stand_in(root: Path, *, hip: str = "6.2.41133-dd7f95766", flags: str | None = "gfx90a gfx942",
              torch_requires: tuple[str, ...] = (), others: tuple[tuple[str, str], ...] = ()) -> Path:
    """A torch 2.4.1+rocm6.2 stand-in (module + dist-info from a file) and a locally built sentencepiece."""
    pkg = root / "torch"
    (pkg / "cuda").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "import types\n__version__ = '2.4.1+rocm6.2'\n"
        f"version = types.SimpleNamespace(hip={hip!r}, cuda=None)\n"
        f"_C = types.SimpleNamespace(_cuda_getArchFlags=lambda: {flags!r})\nfrom . import cuda\n")
    (pkg / "cuda" / "__init__.py").write_text("def is_available():\n    return False\n\n"
                                             "def get_arch_list():\n    return []  # torch 2.3-2.6 without a GPU\n")
    for name, version, tag in [("torch", "2.4.1+rocm6.2", "cp311-cp311-linux_x86_64"),
                               ("sentencepiece", "0.2.0", "cp311-cp311-linux_x86_64"),
                               *((n, v, "py3-none-any") for n, v in others)]:
        info = root / f"{name}-{version}.dist-info"
        info.mkdir()
        requires = "".join(f"Requires-Dist: {r}\n" for r in torch_requires) if name == "torch" else ""
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires}")
        (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nTag: {tag}\n")
        (info / "direct_url.json").write_text(json.dumps({"url": f"file:///dist/{name}-{version}.whl",
                                                          "archive_info": {}}))
    return root


def _rocm_expect(arch: str = "gfx90a") -> dict:
    return {"cell": f"rocm6.2-torch2.4-{arch}-py3.11", "flavor": "rocm", "backend": "hip", "backend_version": "6.2",
            "arch": arch, "torch": {"version": "2.4.1+rocm6.2", "by_path": True}, "sentencepiece": "0.2.0",
            "lock": {"sentencepiece": "0.2.0"}}


def test_rocm_branch_reads_the_compiled_arch_list_without_a_gpu(tmp_path):
    stand_in = _stand_in(tmp_path / "site")
    code, out, record = _verify(tmp_path, _rocm_expect("gfx90a"), stand_in)
    assert code == 0, out
    assert [c["name"] for c in record["checks"]] == [
        "torch version", "torch installed by path", "torch.version.hip", "compiled for gfx90a",
        "sentencepiece built here", "1 pins of the lock installed"]


def test_rocm_branch_fails_on_a_missing_arch_or_another_hip(tmp_path):
    stand_in = _stand_in(tmp_path / "site")
    code, out, record = _verify(tmp_path, _rocm_expect("gfx1100"), stand_in)
    assert code == 1 and _failed(record) == ["compiled for gfx1100"]
    assert "compiled for gfx90a, gfx942" in out and "invalid device function" in out

    other = _stand_in(tmp_path / "site61", hip="6.1.40093-bd86f1708", flags=None)  # no arch flags at all
    code, out, record = _verify(tmp_path, _rocm_expect("gfx90a"), other)
    assert code == 1 and _failed(record) == ["torch.version.hip", "compiled for gfx90a"]
    assert "expected HIP 6.2.x; found hip=6.1.40093-bd86f1708" in out and "no GPU arch" in out


def test_anything_installed_outside_the_lock_fails_unless_torch_requires_it(tmp_path):
    """"complete": every distribution is locked, is torch, or is a requirement of torch (its index's package,
    e.g. pytorch-triton-rocm), which verify.json lists as unlocked; anything else fails the build."""
    others = (("filelock", "3.16.1"), ("pytorch-triton-rocm", "3.0.0"), ("requests", "2.32.3"))
    site = _stand_in(tmp_path / "site", others=others,
                     torch_requires=("filelock", "pytorch-triton-rocm==3.0.0; platform_system == 'Linux'",
                                     "opt-einsum>=3.3; extra == 'opt-einsum'"))
    expect = _rocm_expect() | {"arch": None, "complete": True,
                               "lock": {"sentencepiece": "0.2.0", "filelock": "3.16.1"}}
    code, out, record = _verify(tmp_path, expect, site, isolated=True)
    assert code == 1 and _failed(record) == ["every installed distribution is locked"]
    assert "not in the lock and not a requirement of torch: requests==2.32.3" in out
    assert record["unlocked"] == ["pytorch-triton-rocm==3.0.0"]

    shutil.rmtree(site / "requests-2.32.3.dist-info")
    code, out, record = _verify(tmp_path, expect, site, isolated=True)
    assert code == 0, out
    assert record["unlocked"] == ["pytorch-triton-rocm==3.0.0"]
