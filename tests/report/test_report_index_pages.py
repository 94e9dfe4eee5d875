"""The index comes in pages of a bounded size, however many cells the matrix holds, and its filters still find a
cell on a later page (headless Chromium, from file://).

The store is bench/report_scale.py's realistic one (varied copies of the committed real results), small: 400
cells with one run each, 622 with the recipe cells: three pages; every index file stays under 1 MB, and the part
that grows with the cell count (index-cells.js) stays under 1 MB at 5,000 cells.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from click.testing import CliRunner

from builder.cli import main
from builder.report.site import INDEX_PAGE_CELLS
from repo import REPO_ROOT
from report_browser import inspect_page, require_chromium

LIMIT = 1_000_000


def _site(tmp_path: Path) -> Path:
    spec = importlib.util.spec_from_file_location("report_scale", REPO_ROOT / "bench" / "report_scale.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    db, site = tmp_path / "matrix.db", tmp_path / "site"
    bench.realistic_db(db, runs=400, n_cells=400)
    result = CliRunner().invoke(main, ["report", "-o", str(site), "--db", str(db), "--no-results"])
    assert result.exit_code == 0, result.output
    return site


def _cells(site: Path) -> dict:
    text = (site / "index-cells.js").read_text()
    assert text.startswith("window.envbuildCells = ") and text.endswith(";\n")
    return json.loads(text[len("window.envbuildCells = ") : -2])


def test_every_index_page_stays_small_and_a_filter_finds_a_cell_on_a_later_page(tmp_path):
    site = _site(tmp_path)
    data = _cells(site)
    n = len(data["cells"])
    pages = sorted(site.glob("index*.html"))
    assert n > INDEX_PAGE_CELLS and len(pages) == data["pages"] == -(-n // INDEX_PAGE_CELLS)
    sizes = {p.name: p.stat().st_size for p in [*pages, site / "index-cells.js"]}
    assert max(sizes.values()) < LIMIT, sizes
    assert sizes["index-cells.js"] / n * 5000 < LIMIT  # the only index file that grows with the cell count
    rows = {p.name: p.read_text().count('<tr data-cell="') for p in pages}
    assert sum(rows.values()) == n and max(rows.values()) == INDEX_PAGE_CELLS

    require_chromium()
    fields = data["fields"]
    last = data["cells"][-1]
    want = {f: data["values"][f][last[2 + i]] for i, f in enumerate(fields)}
    assert last[1] == data["pages"] > 1  # on the last page, not the first
    expression = """(function (want) {
      var f = document.getElementById('filters');
      Object.keys(want).forEach(function (k) { f[k].value = want[k]; });
      f.dispatchEvent(new Event('change'));
      var here = Array.from(document.querySelectorAll('#cells tbody tr')).filter(function (r) { return !r.hidden; });
      var found = Array.from(document.querySelectorAll('#elsewhere li')).map(function (li) {
        var a = li.querySelectorAll('a'); return [a[0].textContent, a[0].getAttribute('href'), a[1].getAttribute('href')];
      });
      return {here: here.length, found: found, shown: document.getElementById('shown').textContent,
              box: !document.getElementById('elsewhere').hidden};
    })(%s)""" % json.dumps(want)
    first = inspect_page((site / "index.html").as_uri(), tmp_path / "first.png", expression)
    assert first.errors == [] and first.value["box"]
    found = {key: (cell, page) for key, cell, page in first.value["found"]}
    assert last[0] in found and found[last[0]][1].startswith(f"index-{last[1]}.html#")
    assert (site / found[last[0]][0]).is_file()
    assert first.value["shown"] == f"{first.value['here'] + len(found)} of {n} cells"

    # the page link carries the filters: the cell is shown there, and the others hidden (at 800 px)
    visible = """(function () {
      var rows = Array.from(document.querySelectorAll('#cells tbody tr')).filter(function (r) { return !r.hidden; });
      return {keys: rows.map(function (r) { return r.dataset.cell; }), arch: document.getElementById('filters').arch.value,
              width: [document.documentElement.scrollWidth, window.innerWidth]};
    })()"""
    later = inspect_page(
        (site / found[last[0]][1].split("#")[0]).as_uri() + "#" + found[last[0]][1].split("#")[1],
        tmp_path / "later.png",
        visible,
        width=800,
    )
    assert later.errors == [] and later.value["arch"] == want["arch"]
    assert last[0] in later.value["keys"] and len(later.value["keys"]) < INDEX_PAGE_CELLS
    assert later.value["width"][0] <= 800  # the page list wraps: no horizontal scroll at 800 px
