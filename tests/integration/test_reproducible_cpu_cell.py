"""Same tag => same content, on the real engine: the cpu cell built twice with no cache is the same image, and
its two SBOMs (builder.sbom, from the packages read inside each image) are the same bytes.

`envbuild image --check-reproducible` builds the cell twice (--no-cache, temporary tags), compares both
filesystems file by file and fails on any difference outside the allow-list in docs/docker.md. Two cold
builds: about 10 minutes on the 2-core CI machine.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from builder.cli import main
from tests.integration.test_build_cpu_cell import CA, _wheelhouse

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_cpu_cell_rebuilds_to_the_same_content(tmp_path, local_base):
    command = [
        "image",
        "--flavor",
        "cpu",
        "--torch",
        "2.13",
        "--base-image",
        local_base,
        "-o",
        str(tmp_path / "ctx"),
        "--ca-cert",
        str(CA),
        "--network",
        "host",
        "--check-reproducible",
    ]
    wheels = _wheelhouse(tmp_path)
    if wheels:
        command += ["--wheelhouse", str(wheels)]
    result = CliRunner().invoke(main, command)
    report = json.loads((tmp_path / "ctx.repro.json").read_text())
    print(
        f"cpu cell, two --no-cache builds ({report['build_seconds'][0]} s, {report['build_seconds'][1]} s): "
        f"{report['differing']} of {report['paths']} paths differ, {report['counted']} outside the allow-list"
    )
    assert result.exit_code == 0, result.output
    print(f"SBOMs: {report['sbom']}")
    assert report["counted"] == 0 and report["paths"] > 40_000
    assert result.stdout.strip().splitlines()[-1] == "differing paths outside the allow-list: 0"
    # two images that should be identical have identical SBOMs, which list what the images hold
    assert report["sbom"]["identical"] is True, report["sbom"]
    first, second = (tmp_path / f"ctx.repro-{n}.sbom.cdx.json" for n in (1, 2))
    assert first.read_bytes() == second.read_bytes()
    assert report["sbom"]["components"][0] > 150 and "SBOMs of the two builds: identical" in result.output
