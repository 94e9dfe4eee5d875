"""One valid result at the schema's edges (three 100,000-point curves, 30+ probes of 50 long values, 2,000
version entries, a 1,000-word command of 4,000-character words) gives a cell page, a compare script and a plot
under 1 MB each; the data file holds the curves downsampled and says how long they were; the store keeps
every point."""

from __future__ import annotations

import json

from click.testing import CliRunner

from builder.cli import main
from builder.report.curve_points import REPORT_POINTS
from builder.slug import safe_slug
from builder.store.store import MatrixStore, validate_result
from matrix_fixtures import make_result

PAGE_LIMIT = 1_000_000
POINTS = 100_000


def _edge_result() -> dict:
    result = make_result()
    curves = result["metrics"]["curves"]
    for name in ("train_loss", "grad_norm", "extra"):
        curves[name] = [[i, 1.0 + i * 1e-6] for i in range(POINTS)]
    probe = result["probes"][0]
    result["probes"] = [
        dict(probe, name=f"probe{i}", message="<b>" + "m" * 4000, values={f"k{j}": "v" * 4000 for j in range(50)})
        for i in range(40)
    ]
    result["invocation"] = {"envbuild": ["x" * 4000] * 1000, "argv": ["y" * 4000] * 1000}
    result["versions"].update({f"pkg{i}": "1.0" + "x" * 150 for i in range(2000)})
    return validate_result(result)


def test_a_result_at_the_schema_edges_gives_small_pages_and_keeps_its_curves(tmp_path):
    result = _edge_result()
    (tmp_path / "result.json").write_text(json.dumps(result))
    db, site = tmp_path / "m.db", tmp_path / "site"
    runner = CliRunner()
    imported = runner.invoke(main, ["matrix", "import", "--db", str(db), str(tmp_path / "result.json")])
    assert imported.exit_code == 0, imported.output
    report = runner.invoke(main, ["report", "--db", str(db), "-o", str(site)])
    assert report.exit_code == 0, report.output
    slug = safe_slug("rocm6.2-torch2.4-gfx90a-py3.10")
    page = site / "cells" / f"{slug}.html"
    for path in (page, site / "compare" / f"{slug}.js", *(site / "plots").glob(f"{slug}-*.svg")):
        assert path.stat().st_size < PAGE_LIMIT, (path, path.stat().st_size)
    text = page.read_text()
    assert "more probes in the cell&#39;s data file" in text and "more rows in the cell&#39;s data file" in text
    assert "characters; the cell&#39;s data file has all)" in text
    (run,) = json.loads((site / "data" / f"{slug}.json").read_text())["runs"]
    assert {name: len(points) for name, points in run["metrics"]["curves"].items()} == {
        "train_loss": REPORT_POINTS,
        "grad_norm": REPORT_POINTS,
        "extra": REPORT_POINTS,
    }
    assert run["metrics"]["curves_points"] == {"train_loss": POINTS, "grad_norm": POINTS, "extra": POINTS}
    assert run["metrics"]["curves"]["train_loss"][-1] == [POINTS - 1, 1.0 + (POINTS - 1) * 1e-6]
    with MatrixStore.open(db) as store:
        (stored,) = store.runs_json("rocm6.2-torch2.4-gfx90a-py3.10")
    assert len(json.loads(stored)["metrics"]["curves"]["train_loss"]) == POINTS
