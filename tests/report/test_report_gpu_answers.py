"""The per-GPU-name answer pages: measured passes first, then vendor claims, then cells that only render; every
recipe cell of the GPU's arch is on its page once."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from builder.cli import main
from builder.plan.recipe_cells import recipe_cells
from matrix_fixtures import make_result

MEASURED = "rocm6.2-torch2.4-gfx90a-py3.10"  # make_result's cell: an MI250X run, not one the recipes render


def _sections(page: str) -> dict[str, list[str]]:
    parts = re.split(r'<h2 id="(measured|claimed|renders)">', page)[1:]
    return {parts[i]: re.findall(r'<tr data-cell="([^"]+)"', parts[i + 1]) for i in range(0, len(parts), 2)}


def test_measured_passes_come_first_then_claims_then_cells_that_render(tmp_path):
    db, site = tmp_path / "m.db", tmp_path / "site"
    result = tmp_path / "result.json"
    result.write_text(json.dumps(make_result()))
    assert CliRunner().invoke(main, ["matrix", "import", str(result), "--db", str(db)]).exit_code == 0
    made = CliRunner().invoke(main, ["report", "-o", str(site), "--db", str(db), "--no-results"])
    assert made.exit_code == 0, made.output
    mi250x = (site / "gpus" / "MI250X.html").read_text()
    sections = _sections(mi250x)
    assert sections["measured"] == [MEASURED]
    assert f'href="../cells/{MEASURED}.html"><code>{MEASURED}</code></a> first: it passed on hardware' in mi250x
    listed = sections["measured"] + sections["claimed"] + sections["renders"]
    assert len(listed) == len(set(listed))  # each cell once
    gfx90a = {c.key for c in recipe_cells(every=True) if c.arch == "gfx90a"}
    assert set(sections["claimed"]) | set(sections["renders"]) <= gfx90a
    mi300x = _sections((site / "gpus" / "MI300X.html").read_text())
    assert mi300x["measured"] == [] and mi300x["claimed"] and all("gfx942" in k for k in mi300x["claimed"])
    index = (site / "index.html").read_text()
    assert 'href="gpus/MI250X.html">MI250X</a>' in index and 'href="gpus/MI355X.html">MI355X</a>' in index
