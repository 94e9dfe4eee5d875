"""`envbuild image --registry R --reuse-remote --push` against a real registry on loopback.

Debian's docker-registry (the CNCF Distribution registry, apt) serves on 127.0.0.1; the engine treats
127.0.0.0/8 registries as insecure (plain HTTP) by default. This is what the generated CI workflow calls
per cell: a content-hash tag already in the registry is pulled, never rebuilt; a missing one is built and
pushed; an unreachable registry falls back to building.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> str:
    binary = shutil.which("docker-registry")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("docker-registry is missing: .ci/run installs it (apt-get install docker-registry)")
        pytest.skip("needs docker-registry (apt-get install docker-registry)")
    root = tmp_path_factory.mktemp("registry")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (root / "config.yml").write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root / 'data'}\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen(
        [binary, "serve", str(root / "config.yml")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def context(tmp_path, local_base) -> Path:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {local_base}\nRUN echo {uuid.uuid4().hex} > /marker\n")
    return ctx


def _image(ctx: Path, tag: str, registry: str):
    return CliRunner().invoke(
        main,
        [
            "image",
            "--context",
            str(ctx),
            "--tag",
            tag,
            "--registry",
            registry,
            "--reuse-remote",
            "--push",
            "--no-record",
            "--network",
            "host",
        ],
    )


def test_a_tag_in_the_registry_is_pulled_not_rebuilt(context, registry, docker_engine):
    tag = f"envbuild-test/reuse:{uuid.uuid4().hex[:12]}"
    full = f"{registry}/{tag}"
    first = _image(context, tag, registry)
    assert first.exit_code == 0, first.output
    assert "cannot be pulled (not in the registry)" in first.output and "built" in first.output
    assert "pushed" in first.output
    marker = docker_engine.containers.run(full, ["cat", "/marker"], remove=True)
    docker_engine.images.remove(full, force=True)

    again = _image(context, tag, registry)
    assert again.exit_code == 0, again.output
    assert "its content-hash tag exists in the registry" in again.output and "skipped" in again.output
    assert "building" not in again.output
    assert docker_engine.containers.run(full, ["cat", "/marker"], remove=True) == marker  # the same image
    docker_engine.images.remove(full, force=True)


def test_an_unreachable_registry_falls_back_to_building(context):
    result = CliRunner().invoke(
        main,
        [
            "image",
            "--context",
            str(context),
            "--tag",
            "envbuild-test/reuse:x",
            "--registry",
            "127.0.0.1:1",
            "--reuse-remote",
            "--no-record",
            "--network",
            "host",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "cannot be pulled" in result.output and "built" in result.output
    subprocess.run(["docker", "rmi", "-f", "127.0.0.1:1/envbuild-test/reuse:x"], capture_output=True)


def test_reuse_remote_needs_a_registry(context):
    result = CliRunner().invoke(main, ["image", "--context", str(context), "--tag", "t:1", "--reuse-remote"])
    assert result.exit_code == 2 and "--registry" in result.output
