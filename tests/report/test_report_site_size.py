"""No file of the report's site over 1 MB with many cells and many runs per cell, and the compare
page still joins any two cells from file:// (each cell's profiles loaded from its own script when picked).

The store is bench/report_scale.py's realistic one (varied copies of the committed real results, ~16 kB
each), smaller: 150 cells x 4 runs (2-3 configurations each), and 120 more runs in one cell. The full
10,000-run figure is the bench's (docs/matrix.md).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from click.testing import CliRunner

from builder.cli import main
from builder.slug import safe_slug
from repo import REPO_ROOT
from report_browser import inspect_page, require_chromium
from site_files import compare_scripts

SITE_FILE_LIMIT = 1_000_000


def _bench():
    spec = importlib.util.spec_from_file_location("report_scale", REPO_ROOT / "bench" / "report_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _site(tmp_path: Path) -> Path:
    bench, db, site = _bench(), tmp_path / "matrix.db", tmp_path / "site"
    bench.realistic_db(db, runs=600, n_cells=150)
    bench.realistic_db(db, runs=120, n_cells=1, seed=14)  # one busy cell: its data file is split
    result = CliRunner().invoke(main, ["report", "-o", str(site), "--db", str(db), "--no-results"])
    assert result.exit_code == 0, result.output
    return site


def test_no_site_file_reaches_1_mb_and_the_compare_page_loads_picked_cells_from_file_urls(tmp_path):
    site = _site(tmp_path)
    sizes = {p.relative_to(site).as_posix(): p.stat().st_size for p in site.rglob("*") if p.is_file()}
    largest = max(sizes, key=sizes.get)
    assert sizes[largest] < SITE_FILE_LIMIT, (largest, sizes[largest])
    assert any(name.startswith("data/") and "-runs-2.json" in name for name in sizes)  # the busy cell's runs
    profiles = compare_scripts(site)
    assert len(profiles) == 150 and sum(len(p) for p in profiles.values()) >= 300  # smoke and speed, each cell
    # together over the limit (all in compare.html before: 2.0 MB); now a page of keys and file names
    assert sum(size for name, size in sizes.items() if name.startswith("compare/")) > SITE_FILE_LIMIT
    assert sizes["compare.html"] < 100_000

    require_chromium()
    keys = list(profiles)
    a_key, b_key = keys[100], next(k for k in keys[120:] if k.split("-")[1] != keys[100].split("-")[1])
    a = profiles[a_key][0]
    b = next((p for p in profiles[b_key] if p["configuration"] == a["configuration"]), profiles[b_key][0])
    expression = f"""new Promise(function (resolve) {{
      var loaded = function () {{ return Array.from(document.querySelectorAll('script[src^="compare/"]')).map(
        function (s) {{ return s.getAttribute('src'); }}); }};
      var before = loaded();
      var f = document.getElementById('pick'); f.a.value = {json.dumps(a_key)}; f.b.value = {json.dumps(b_key)};
      f.dispatchEvent(new Event('change'));
      var tries = 0;
      (function wait() {{
        var runs = document.getElementById('runs').textContent;
        if (runs.indexOf({json.dumps(b["run_id"])}) < 0 && ++tries < 200) {{ setTimeout(wait, 25); return; }}
        var torch = Array.from(document.querySelectorAll('#versions tbody tr'))
          .find(function (r) {{ return r.cells[0].textContent === 'torch'; }});
        resolve({{before: before, after: loaded(), runs: runs, curves: document.querySelectorAll('#curves polyline').length,
                  torch: torch ? [torch.cells[1].textContent, torch.cells[2].textContent] : null}});
      }})();
    }})"""
    page = inspect_page((site / "compare.html").as_uri(), tmp_path / "compare.png", expression)
    assert page.errors == []
    v = page.value
    assert v["before"] == [f"compare/{safe_slug(k)}.js" for k in keys[:2]]  # the two cells shown at first
    assert v["after"] == v["before"] + [f"compare/{safe_slug(k)}.js" for k in (a_key, b_key)]
    assert f"A: run {a['run_id']} ({a['configuration']}" in v["runs"]
    assert f"B: run {b['run_id']} ({b['configuration']}" in v["runs"]
    assert v["torch"] == [a["versions"]["torch"], b["versions"]["torch"]] and v["torch"][0] != v["torch"][1]
    assert v["curves"] == 2
