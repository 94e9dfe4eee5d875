"""Fixtures of the integration tests that share one expensive thing: the cpu cell's image, built once per session."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from builder.cli import main
from tests.integration.test_build_cpu_cell import cpu_cell_command
from shared_builds import one_build_at_a_time


@pytest.fixture(scope="session")
def cpu_cell_image(tmp_path_factory, local_base, docker_engine) -> str:
    """The cpu cell's image tag, built from the local base by BuildKit (not recorded), or found already built under
    its content-hash tag (by test_build_cpu_cell.py earlier in the session, or an earlier session): a user's
    request (proxy CA as a secret, `--network host`, the CPU torch wheel as wheelhouse where there is one)."""
    work = tmp_path_factory.mktemp("cpu-cell-image")
    with one_build_at_a_time(tmp_path_factory, "cpu-cell"):
        built = CliRunner().invoke(main, cpu_cell_command(local_base, work, "--no-record"))
    assert built.exit_code == 0, built.output
    return built.stdout.strip().splitlines()[-1]
