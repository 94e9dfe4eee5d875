"""A rendered cpu context really builds here: the base stage on the registry-free local Debian image.

Only `--target base` (about a minute cold, seconds when cached): it proves the Dockerfile parses with
the engine's built-in BuildKit frontend (no `# syntax=`), that install_python.sh brings Python and
the venv to a minbase image without Python or CA certificates, and that no trace of the CA secret
stays in the image. The full cpu image build (about 7 minutes) is documented in docs/render.md.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from builder.plan.render import render
from builder.plan.resolve import Request, resolve

DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
CA = Path("/etc/ssl/certs/ca-certificates.crt")

pytestmark = pytest.mark.docker


def test_cpu_base_stage_builds_on_the_local_minbase(tmp_path, local_base):
    rendered = render(resolve(Request(flavor="cpu", torch="2.13", base_image=local_base)), tmp_path / "ctx")
    tag = f"envbuild-test/render-base:{rendered.context_hash[:12]}"
    secret = ["--secret", f"id=envbuild_ca,src={CA}"] if CA.is_file() else []
    build = subprocess.run(
        [DOCKER, "build", "--network", "host", "--target", "base", *secret, "-t", tag, str(rendered.out_dir)],
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    try:
        probe = subprocess.run(
            [
                DOCKER,
                "run",
                "--rm",
                tag,
                "bash",
                "-c",
                "python --version && command -v python && ls /etc/apt/apt.conf.d && ls -A /run/secrets 2>/dev/null | wc -l",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert probe.returncode == 0, probe.stderr
        lines = probe.stdout.splitlines()
        assert lines[0].startswith("Python 3.11."), probe.stdout  # Debian bookworm's python3.11
        assert lines[1] == "/opt/venv/bin/python"  # the venv is first on PATH
        assert "99envbuild-ca" not in probe.stdout  # the apt CA setting left with its step
        assert lines[-1] == "0"  # nothing under /run/secrets in the image
    finally:
        subprocess.run([DOCKER, "rmi", "-f", tag], capture_output=True)
