"""Same tag => same content, on the real engine: the cpu cell's image (built once per session: `cpu_cell_image`,
tests/integration/conftest.py) and one cold rebuild of the same request are the same image, and their two SBOMs
(builder.sbom, from the packages read inside each image) are the same bytes.

`envbuild image --check-reproducible` finds the tag on the engine with this context's hash label, rebuilds the
context once (--no-cache, a temporary tag), compares both filesystems file by file and fails on any difference
outside the allow-list in docs/docker.md. One cold build: about 5 minutes on the 2-core CI machine.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from builder.cli import main
from shared_builds import one_build_at_a_time
from tests.integration.test_build_cpu_cell import cpu_cell_command

pytestmark = [pytest.mark.docker, pytest.mark.second_lane, pytest.mark.slow]


def test_cpu_cell_rebuilds_to_the_same_content_as_its_image(
    cpu_cell_image, tmp_path, tmp_path_factory, local_base, docker_engine
):
    with one_build_at_a_time(tmp_path_factory, "cpu-cell"):  # the other lane tags nothing meanwhile
        image_id = docker_engine.images.get(cpu_cell_image).id
        result = CliRunner().invoke(main, cpu_cell_command(local_base, tmp_path, "--check-reproducible"))
        after_id = docker_engine.images.get(cpu_cell_image).id
    report = json.loads((tmp_path / "ctx.repro.json").read_text())
    print(
        f"cpu cell, {report['compared']}: rebuilt in {report['build_seconds'][0]} s; "
        f"{report['differing']} of {report['paths']} paths differ, {report['counted']} outside the allow-list"
    )
    assert result.exit_code == 0, result.output
    print(f"SBOMs: {report['sbom']}")
    # the session's image under the same content-hash tag, against one rebuild; it is still there, unchanged
    assert report["compared"] == f"existing image {cpu_cell_image} (id {image_id}) against one --no-cache rebuild"
    assert len(report["build_seconds"]) == 1 and report["tags"][0] == cpu_cell_image
    assert after_id == image_id
    assert not docker_engine.images.list(name=report["tags"][1])
    assert report["counted"] == 0 and report["paths"] > 40_000
    assert result.stdout.strip().splitlines()[-1] == "differing paths outside the allow-list: 0"
    # two images that should be identical have identical SBOMs, which list what the images hold
    assert report["sbom"]["identical"] is True, report["sbom"]
    first, second = (tmp_path / f"ctx.repro-{n}.sbom.cdx.json" for n in (1, 2))
    assert first.read_bytes() == second.read_bytes()
    assert report["sbom"]["components"][0] > 150
    assert "SBOMs of the existing image and the rebuild: identical" in result.output
