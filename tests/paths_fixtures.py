"""A read-only directory for the output-path tests: mode 555 for a normal user, a read-only tmpfs for root."""

from __future__ import annotations

import os
import subprocess

import pytest


@pytest.fixture
def read_only_dir(tmp_path):
    path = tmp_path / "read-only"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )
    if not mounted:
        pytest.skip("root cannot mount a read-only tmpfs here, and mode 555 does not stop root")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)
