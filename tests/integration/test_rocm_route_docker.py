"""The ROCm source route's steps that need no AMD hardware, built for real on an old userspace.

The rendered context of `--rocm 6.2 --torch 2.4 --python 3.11` (a source-build cell) is built stage by
stage on the registry-free Debian 12 base: its system Python 3.11 makes the image venv with Debian's pip
23.0.1 and no `wheel`, as old as Ubuntu 22.04's pip 22.0.2 for the purpose (both < 23.1). Two build
arguments differ from the recipe, because their targets cannot be reached here: `OS_PACKAGES=` (the ROCm apt
repository of the rocm/dev base) and, for the torch source stage, `TORCH_GIT_URL` (a local git daemon
serving a repository tagged v2.4.1 instead of GitHub). Everything else -- scripts, pins, lock, patch
series mechanism -- is the cell's own. What cannot run here (the ROCm packages, hipify + the torch build,
the runtime stage that needs the built wheel) is listed in docs/rocm-route.md.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from builder.plan.render import render
from builder.plan.resolve import Request, resolve

pytestmark = [pytest.mark.docker, pytest.mark.slow]
DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
CA = Path("/etc/ssl/certs/ca-certificates.crt")
UNREACHABLE_HERE = ["OS_PACKAGES="]  # the ROCm apt repository of rocm/dev-ubuntu-22.04


@pytest.fixture(scope="module")
def rocm_cell(tmp_path_factory, local_base):
    plan = resolve(Request(accel_version="6.2", torch="2.4", python="3.11", base_image=local_base))
    assert plan.torch_source == "source" and plan.stack["sentencepiece"] == "0.2.0"  # the ROCm cells' pin
    return render(plan, tmp_path_factory.mktemp("rocm-route") / "ctx")


def _build(ctx: Path, target: str, *build_args: str) -> tuple[subprocess.CompletedProcess, str]:
    tag = f"envbuild-test/rocm-route-{target}:{int(time.time() * 1000)}"
    secret = ["--secret", f"id=envbuild_ca,src={CA}"] if CA.is_file() else []
    args = [a for value in [*UNREACHABLE_HERE, *build_args] for a in ("--build-arg", value)]
    proc = subprocess.run(
        [
            DOCKER,
            "build",
            "--progress=plain",
            "--network",
            "host",
            "--target",
            target,
            *secret,
            *args,
            "-t",
            tag,
            str(ctx),
        ],
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        capture_output=True,
        text=True,
        timeout=1500,
    )
    return proc, tag


def _run(tag: str, script: str) -> str:
    try:
        proc = subprocess.run(
            [DOCKER, "run", "--rm", "--network", "none", tag, "bash", "-c", script],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
    finally:
        subprocess.run([DOCKER, "rmi", "-f", tag], capture_output=True)


def test_venv_gets_the_pinned_pip_setuptools_and_wheel_over_the_os_pip(rocm_cell):
    proc, tag = _build(rocm_cell.out_dir, "base")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = _run(
        tag,
        "/usr/bin/python3 -m pip --version 2>/dev/null || echo 'no system pip'; "
        "python -c 'import importlib.metadata as m; "
        'print(*(m.version(d) for d in ("pip", "setuptools", "wheel")))\'',
    )
    pins = rocm_cell.manifest["build_tools"]["venv"]
    assert out.splitlines()[-1].split() == [pins["pip"], pins["setuptools"], pins["wheel"]]


def test_sentencepiece_at_the_rocm_pin_builds_from_its_sdist(rocm_cell):
    """Defect 1: with Debian's pip 23.0.1 and no `wheel` in the venv this stage ended in
    "invalid command 'bdist_wheel'"; the venv's pinned tools build it."""
    proc, tag = _build(rocm_cell.out_dir, "sentencepiece")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "invalid command 'bdist_wheel'" not in proc.stderr
    out = _run(tag, "ls /dist/sentencepiece")
    assert out.split() == ["sentencepiece-0.2.0-cp311-cp311-linux_x86_64.whl"]  # built here: no manylinux tag


def test_the_sentencepiece_sdist_is_checked_against_the_lock_hashes(rocm_cell, tmp_path):
    """The stage downloads the sdist in pip's hash-checking mode (sentencepiece.lock, from recipes/locks/):
    a file the lock does not name fails the build before anything is compiled."""
    ctx = tmp_path / "ctx"
    shutil.copytree(rocm_cell.out_dir, ctx)
    lock = ctx / "sentencepiece.lock"
    lock.write_text(re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "0" * 64, lock.read_text()))
    proc, _ = _build(ctx, "sentencepiece")
    assert proc.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in proc.stderr


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


@pytest.fixture(scope="module")
def torch_remote(tmp_path_factory):
    """A git daemon on loopback serving `pytorch.git`: tag v2.4.1, plus a fix commit that is not on the tag
    (as an upstream fix is) and a commit that conflicts with the tag. Yields (url, fix sha, conflict sha, tag sha)."""
    root = tmp_path_factory.mktemp("git")
    repo = root / "pytorch.git"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "version.txt").write_text("2.4.1\n")
    (repo / "setup.py").write_text("print('stand-in source tree')\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "release")
    _git(repo, "tag", "v2.4.1")
    release = _git(repo, "rev-parse", "HEAD")
    (repo / "fix.txt").write_text("fixed upstream\n")
    _git(repo, "add", "fix.txt")
    _git(repo, "commit", "-q", "-m", "upstream fix")
    fix = _git(repo, "rev-parse", "HEAD")
    (repo / "setup.py").write_text("print('changed twice')\n")
    _git(repo, "commit", "-q", "-am", "unrelated change")
    (repo / "setup.py").write_text("print('conflicting change')\n")
    _git(repo, "commit", "-q", "-am", "conflicts with the tag")
    conflict = _git(repo, "rev-parse", "HEAD")
    _git(repo, "config", "uploadpack.allowAnySHA1InWant", "true")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    daemon = subprocess.Popen(
        [
            "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            f"--base-path={root}",
            "--listen=127.0.0.1",
            f"--port={port}",
            str(root),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(50):
            if (
                subprocess.run(
                    ["git", "ls-remote", f"git://127.0.0.1:{port}/pytorch.git"], capture_output=True
                ).returncode
                == 0
            ):
                break
            time.sleep(0.1)
        yield f"git://127.0.0.1:{port}/pytorch.git", fix, conflict, release
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


def _series(ctx: Path, *shas: str) -> None:
    lines = [f"commit {sha} https://github.com/pytorch/pytorch/pull/1" for sha in shas]
    (ctx / "patches" / "series").write_text("\n".join(lines) + "\n")


def test_torch_source_stage_fetches_the_pinned_commit_and_applies_the_patch_series(rocm_cell, torch_remote, tmp_path):
    url, fix, conflict, release = torch_remote
    ctx = tmp_path / "ctx"
    subprocess.run(["cp", "-a", str(rocm_cell.out_dir), str(ctx)], check=True)
    _series(ctx, fix)
    proc, tag = _build(ctx, "torch-src", f"TORCH_GIT_URL={url}", f"TORCH_GIT_COMMIT={release}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"applied commit {fix}" in proc.stderr and "patch series: 1 applied" in proc.stderr
    out = _run(tag, "cd /src/pytorch && git rev-parse HEAD && cat fix.txt && cat version.txt")
    assert out.split("\n")[:3] == [release, "fixed upstream", "2.4.1"]

    _series(ctx, conflict)  # a commit that does not apply stops the build and says which and why
    proc, _ = _build(ctx, "torch-src", f"TORCH_GIT_URL={url}", f"TORCH_GIT_COMMIT={release}")
    assert proc.returncode != 0
    assert f"envbuild: commit {conflict} does not apply to the source at" in proc.stderr
