"""The workload under the older Hugging Face stacks the recipes pin for torch < 2.6 (transformers 4.x).

Each distinct stack of recipes/hf-stack.toml is installed from PyPI into a virtual environment that
shares this interpreter's torch (the CPU build), from the `requirements.lock` rendered for a ROCm cell of
that line (hashes, --no-deps: as images/common/install_python_stack.sh installs it), and the real smoke
fine-tune runs in it. (sentencepiece comes from PyPI's binary wheel here; its source build at the ROCm
pin runs in tests/integration/test_rocm_route_docker.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from builder.plan.recipes import load
from builder.plan.render import context_files
from builder.plan.resolve import all_plans

ROOT = Path(__file__).resolve().parents[2]


def _transformers4_stacks() -> dict[str, dict[str, str]]:
    """One representative torch line per distinct transformers 4.x pin."""
    chosen: dict[str, dict[str, str]] = {}
    for line, stack in sorted(load().stacks.items()):
        if stack["transformers"].startswith("4.") and stack["transformers"] not in chosen:
            chosen[stack["transformers"]] = stack
    return chosen


def _rocm_lock(transformers: str) -> bytes:
    """The requirements.lock rendered for the first ROCm cell whose stack pins this transformers, for this Python."""
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    plan = next(
        p for p in all_plans(flavor="rocm") if p.stack["transformers"] == transformers and p.cell.python == python
    )
    return context_files(plan)[0]["requirements.lock"]


STACKS = _transformers4_stacks()


def _site_dirs() -> list[str]:
    """The running interpreter's site-packages directories (where its torch is), in sys.path order."""
    return [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]


def make_stack_venv(venv: Path) -> Path:
    """A venv that sees this interpreter's packages (torch) after its own, whichever interpreter runs the tests.

    `venv --system-site-packages` would not do: inside a venv (the README's setup) it exposes the *base*
    interpreter's site-packages, where torch is not installed. A .pth file appends the running interpreter's
    site directories instead, so what the venv installs shadows them, as with --system-site-packages."""
    done = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    python = venv / "bin" / "python"
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert own.returncode == 0, own.stderr[-2000:]
    Path(own.stdout.strip(), "envbuild-test-outer-site.pth").write_text("\n".join(_site_dirs()) + "\n")
    return python


@pytest.fixture(scope="module", params=sorted(STACKS), ids=lambda v: f"transformers-{v}")
def stack_python(request, tmp_path_factory) -> tuple[str, Path]:
    venv = tmp_path_factory.mktemp("hf-stack") / "venv"
    python = make_stack_venv(venv)
    lock = venv.parent / "requirements.lock"
    lock.write_bytes(_rocm_lock(request.param))
    # the lock is complete: pip's hash-checking mode with --no-deps installs every dependency from it
    install = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-compile",  # a few runs compile only what they import (set-up 32 s -> 13 s on the 2-core VM)
            "--only-binary",
            "sentencepiece",
            "--no-deps",
            "--require-hashes",
            "-r",
            str(lock),
        ],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    return request.param, python


def _train(python: Path, out: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [str(python), "-m", "workload", "train", "--preset", "smoke", "--quiet", "--out", str(out), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    result = out / "result.json"
    assert result.is_file(), f"exit {proc.returncode}, no result.json; stderr tail:\n{proc.stderr[-3000:]}"
    return proc.returncode, json.loads(result.read_text())


def test_the_stack_venv_sees_this_interpreters_torch_and_its_own_packages_first(tmp_path):
    python = make_stack_venv(tmp_path / "venv")
    probe = subprocess.run(
        [str(python), "-c", "import sys, torch; print(torch.__file__); print(sys.prefix)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    torch_file, prefix = probe.stdout.split()
    import torch

    assert torch_file == torch.__file__ and prefix == str(tmp_path / "venv")
    own = subprocess.run(
        [str(python), "-c", "import sys; print([p for p in sys.path if 'site-packages' in p][0])"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert own.returncode == 0, own.stderr[-2000:]
    assert own.stdout.strip().startswith(str(tmp_path / "venv")), own.stdout


def test_stacks_cover_the_transformers_4_lines():
    assert {"4.44.2", "4.46.3"} <= set(STACKS)


@pytest.mark.slow
def test_smoke_fine_tune_learns_under_the_pinned_stack(stack_python, tmp_path):
    version, python = stack_python
    code, result = _train(python, tmp_path / "out")
    assert result["versions"]["transformers"] == version
    assert code == 0 and result["status"] == "pass", result.get("error")
    assert result["metrics"]["eval_after"]["accuracy"] > result["metrics"]["eval_before"]["accuracy"] + 0.15
    assert {p["status"] for p in result["probes"] if p["name"] == "tokenizer_integrity"} == {"pass"}


@pytest.mark.slow
def test_a_family_the_stack_lacks_is_named_clearly(stack_python, tmp_path):
    """Gemma 3 arrived in transformers 4.50: the 4.44/4.46 stacks must say so, not crash obscurely."""
    version, python = stack_python
    code, result = _train(python, tmp_path / "out", "--model", "tiny-gemma3", "--no-probes")
    assert code != 0 and result["status"] != "pass"
    assert result["error_class"] == "unsupported_family"
    assert version in result["error"]
