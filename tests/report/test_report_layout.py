"""The report's layout in headless Chromium at 1400 and 800 px: no horizontal scroll on the index or a cell page,
and the compare page's loss axis has round, readable ticks clear of its label. On the committed results/ plus the
recipe cells (what the published site shows)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from report_browser import inspect_page, require_chromium

REPO = Path(__file__).resolve().parents[2]
CPU, GPU = "cpu-torch2.13-py3.11", "cuda13.0-torch2.11-sm_90-py3.12"
ROCM = "rocm6.2-torch2.5-gfx90a-py3.10"
OVERFLOW = "[document.documentElement.scrollWidth, window.innerWidth]"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("layout")
    runner = CliRunner()
    assert runner.invoke(main, ["matrix", "import", "--db", str(tmp / "m.db"), str(REPO / "results")]).exit_code == 0
    made = runner.invoke(main, ["report", "--db", str(tmp / "m.db"), "-o", str(tmp / "site")])
    assert made.exit_code == 0, made.output
    return tmp / "site"


@pytest.mark.parametrize("width", [1400, 800])
@pytest.mark.parametrize(
    "page", ["index.html", f"cells/{ROCM}.html", f"cells/{GPU}.html", "gpus/MI250X.html", "gpus/RX-9070-XT.html"]
)
def test_no_horizontal_scroll(site, tmp_path, page, width):
    require_chromium()
    report = inspect_page((site / page).as_uri(), tmp_path / "shot.png", OVERFLOW, width=width)
    assert report.errors == []
    scroll_width, inner = report.value
    assert inner == width and scroll_width <= width, f"{page} is {scroll_width} px wide at {width} px"


def test_compare_ticks_are_round_and_clear_of_the_axis_label(site, tmp_path):
    require_chromium()
    expression = f"""(function () {{
      var f = document.getElementById('pick'); f.a.value = '{CPU}'; f.b.value = '{GPU}';
      f.dispatchEvent(new Event('change'));
      var ticks = Array.from(document.querySelectorAll('#curves text.ytick'));
      var label = Array.from(document.querySelectorAll('#curves text')).find(
        function (t) {{ return t.textContent.indexOf('training loss') === 0; }}).getBoundingClientRect();
      return {{ticks: ticks.map(function (t) {{ return t.textContent; }}),
               overlaps: ticks.filter(function (t) {{ return t.getBoundingClientRect().left < label.right; }}).length}};
    }})()"""
    report = inspect_page((site / "compare.html").as_uri(), tmp_path / "compare.png", expression, width=1400)
    assert report.errors == []
    ticks = report.value["ticks"]
    values = [float(t) for t in ticks]
    assert len(ticks) == 5 and values[0] == 0
    step = values[1]
    assert all(abs(v - i * step) < 1e-9 for i, v in enumerate(values))  # four equal steps
    mantissa = step / 10 ** __import__("math").floor(__import__("math").log10(step))
    assert round(mantissa, 6) in (1, 2, 2.5, 5)  # a round step: no 2.378 / 1.784 / 0.5945
    assert all(len(re.sub(r"[^0-9]", "", t).lstrip("0")) <= 3 for t in ticks), ticks
    assert report.value["overlaps"] == 0


@pytest.mark.parametrize("width", [1400, 800])
def test_the_gpu_and_torch_filters_narrow_the_index(site, tmp_path, width):
    """Picking a GPU name shows only its arch's cells (grid and table); torch and Python narrow further."""
    require_chromium()
    expression = """(function () {
      var f = document.getElementById('filters'); f.gpu.value = 'MI300X';
      f.dispatchEvent(new Event('change'));
      var rows = Array.from(document.querySelectorAll('#cells tbody tr')).filter(function (r) { return !r.hidden; });
      var archs = rows.map(function (r) { return r.dataset.arch; });
      var shown = document.getElementById('shown').textContent;
      var elsewhere = document.querySelectorAll('#elsewhere li').length;
      f.torch.value = f.torch.options[f.torch.options.length - 1].value; f.dispatchEvent(new Event('change'));
      var narrowed = Array.from(document.querySelectorAll('#cells tbody tr')).filter(function (r) { return !r.hidden; });
      return {archs: archs, shown: shown, elsewhere: elsewhere, narrowed: narrowed.length,
              torch: f.torch.value, narrowedTorch: narrowed.map(function (r) { return r.dataset.torch; }),
              width: [document.documentElement.scrollWidth, window.innerWidth]};
    })()"""
    report = inspect_page((site / "index.html").as_uri(), tmp_path / "filter.png", expression, width=width)
    assert report.errors == []
    seen = report.value
    assert seen["archs"] and set(seen["archs"]) == {"gfx942"}
    assert seen["shown"].startswith(f"{len(seen['archs']) + seen['elsewhere']} of ")  # this page's and the others'
    assert set(seen["narrowedTorch"]) <= {seen["torch"]} and seen["narrowed"] <= len(seen["archs"])
    assert seen["width"][0] <= width
