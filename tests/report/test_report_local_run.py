"""End to end: a run recorded by `envbuild run workload --local` appears in `envbuild report` (and in Chromium)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from builder.plan.cells import Cell
from report_browser import inspect_page, require_chromium
from site_files import index_pages

ENVBUILD = [sys.executable, "-c", "from builder.cli import main; main()"]


@pytest.mark.slow
def test_a_local_workload_run_appears_in_the_report(tmp_path):
    db, run_dir, site = tmp_path / "m.db", tmp_path / "run", tmp_path / "site"
    # The verdict configuration (the smoke preset as it stands: a shortened run would be a measurement, not the
    # cell's verdict, docs/matrix.md): what it recorded reaches the report as the cell's pass.
    run = subprocess.run(
        [*ENVBUILD, "run", "workload", "--local", "--out", str(run_dir), "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    result_path = run_dir / "result.json"
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = json.loads(result_path.read_text())
    key, verdict = Cell.from_result(result).key, "pass"
    assert key == "cpu-torch2.13-py3.11"

    again = subprocess.run(
        [*ENVBUILD, "matrix", "import", str(result_path), "--db", str(db)], capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert "imported 0 new run(s), 1 already recorded" in again.stdout, again.stderr  # the file is what was recorded
    report = subprocess.run(
        [*ENVBUILD, "report", "-o", str(site), "--db", str(db), "--no-results"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr[-2000:]
    data = {c["key"]: c for c in json.loads((site / "data.json").read_text())["cells"]}
    assert data[key]["status"] == verdict
    assert data[key]["runs"] == 1
    cell_data = json.loads((site / data[key]["data"]).read_text())
    assert [r["run_id"] for r in cell_data["runs"]] == [result["run_id"]]
    published_host = cell_data["runs"][0].get("host") or {}
    assert "hostname" not in published_host and "kernel_cmdline" not in published_host
    page = (site / "cells" / f"{key}.html").read_text()
    assert result["run_id"] in page and result["versions"]["torch"] in page
    assert f'data-cell="{key}" data-status="{verdict}"' in index_pages(site)

    require_chromium()
    shot = tmp_path / "cell.png"
    seen = inspect_page(
        (site / "cells" / f"{key}.html").as_uri(),
        shot,
        "({status: document.getElementById('cell-status').textContent,"
        " images: Array.from(document.images).map(i => i.complete && i.naturalWidth > 0)})",
    )
    assert seen.errors == []
    assert seen.value["status"] == verdict and seen.value["images"] and all(seen.value["images"])
    print(f"screenshot: {shot}")
