"""`envbuild matrix diff`, the report's compare page and docs/compatibility.md, on the measured results/.

results/ holds real runs (docs in results/README.md): the cpu cell from a container build here and the
sm_90 cell from `envbuild run workload --local` on the device machine (an H200 run, then an H100 run: the newest
smoke run, the H100's, is the one a diff and the compare page show).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.slug import safe_slug
from repo import REPO_ROOT
from report_browser import inspect_page, require_chromium
from site_files import compare_scripts

RESULTS = REPO_ROOT / "results"
CPU, GPU = "cpu-torch2.13-py3.11", "cuda13.0-torch2.11-sm_90-py3.12"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "240"})


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("results") / "matrix.db"
    imported = invoke("matrix", "import", "--db", str(path), str(RESULTS))
    assert imported.exit_code == 0, imported.output
    return path


def _rows(output: str) -> dict[tuple[str, str], dict]:
    return {(r["section"], r["name"]): r for r in json.loads(output)["rows"]}


def test_diff_puts_versions_throughput_and_probes_side_by_side(db):
    result = invoke("matrix", "diff", CPU, GPU, "--db", str(db), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    rows = _rows(result.output)
    assert data["a"]["preset"] == data["b"]["preset"] == "smoke"  # B's run of A's preset, not B's newest
    torch = rows[("versions", "torch")]
    assert torch["a"] == "2.13.0+cpu" and torch["b"] == "2.11.0+cu130" and torch["differs"]
    speed = rows[("speed", "samples_per_s")]
    assert speed["label"] == "training throughput (samples/s)" and speed["b_text"] == "722.2"
    assert rows[("learning", "eval_after_accuracy")]["label"] == "eval accuracy after training (fraction correct)"
    memory = rows[("memory", "peak_memory_allocated_bytes")]
    assert memory["a"] is None and memory["b_text"] == "0.08 GiB" and memory["label"].endswith("(GiB)")
    assert rows[("speed", "mfu")]["b_text"] == "0.0015%"
    assert speed["ratio"] == pytest.approx(speed["b"] / speed["a"]) and speed["ratio"] > 10
    assert (
        rows[("versions", "gpu")]["a"] == "CPU only" and rows[("versions", "gpu")]["b"] == "NVIDIA H100 80GB HBM3 x 1"
    )
    versions = [r for r in data["rows"] if r["section"] == "versions"]
    assert [r["differs"] for r in versions] == sorted((r["differs"] for r in versions), reverse=True)
    cost = rows[("speed", "cost_per_1k_samples")]
    assert cost["a"] is None and cost["b"] == pytest.approx(1000 * 2.69 / (speed["b"] * 3600), rel=1e-3)
    assert data["train_loss"]["a"] and data["train_loss"]["b"]


def test_diff_names_the_side_outside_a_probe_limit(db, tmp_path):
    smoke = [json.loads(p.read_text()) for p in (RESULTS / GPU).glob("*/result.json")]
    result = max((r for r in smoke if r["config"]["preset"] == "smoke"), key=lambda r: r["finished_at"])
    probe = next(p for p in result["probes"] if p["name"] == "sdpa_vs_math")
    probe["status"], probe["message"] = "fail", "bf16 error above its limit"
    result["run_id"] = "f" * 32
    result["finished_at"] = result["finished_at"][:-3] + "59Z"  # the same minute, after it: the newest smoke run
    copy = tmp_path / "matrix.db"
    shutil.copy(db, copy)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "result.json").write_text(json.dumps(result))
    assert invoke("matrix", "import", "--db", str(copy), str(tmp_path / "r")).exit_code == 0
    out = invoke("matrix", "diff", CPU, GPU, "--db", str(copy), "--json")
    rows = _rows(out.output)
    assert rows[("probes", "sdpa_vs_math.status")]["out_of_limit"] == "B"
    text = invoke("matrix", "diff", CPU, GPU, "--db", str(copy))
    assert text.exit_code == 0 and "out of limit: B" in text.output


def test_diff_of_an_unknown_cell_is_bad_input(db):
    result = invoke("matrix", "diff", CPU, "rocm6.2-torch2.4-gfx90a-py3.10", "--db", str(db))
    assert result.exit_code == 2 and "no runs of 'rocm6.2-torch2.4-gfx90a-py3.10'" in result.output


def test_committed_compatibility_summary_is_up_to_date(db, tmp_path):
    """docs/compatibility.md is what `envbuild report --markdown` gives for results/; stale = this test fails."""
    doc = REPO_ROOT / "docs" / "compatibility.md"
    check = invoke("report", "--db", str(db), "--markdown", str(doc), "--check")
    assert check.exit_code == 0, (
        check.output + "\nregenerate: envbuild matrix import --db /tmp/r.db results/ && "
        "envbuild report --db /tmp/r.db --markdown docs/compatibility.md"
    )
    text = doc.read_text()
    assert (
        f"| {GPU.replace('_', chr(92) + '_')} |" in text
        and f"| {CPU} |" in text
        and "NVIDIA H100 80GB HBM3 × 1" in text
    )
    stale = tmp_path / "compatibility.md"
    stale.write_text(text.replace("NVIDIA H100", "NVIDIA H200"))
    assert invoke("report", "--db", str(db), "--markdown", str(stale), "--check").exit_code == 1


def test_compare_page_in_headless_chromium(db, tmp_path):
    require_chromium()
    site = tmp_path / "site"
    assert invoke("report", "--db", str(db), "-o", str(site)).exit_code == 0
    profiles = compare_scripts(site)  # each cell's own compare/<slug>.js, strict JSON; none in compare.html
    assert sorted(profiles) == sorted([CPU, GPU]) and '"run_id"' not in (site / "compare.html").read_text()
    gpu_speed = next(p for p in profiles[GPU] if p["configuration"] == "smoke · tiny-gemma")["speed"]["samples_per_s"]
    assert f"{gpu_speed:,.1f}" == "722.2"
    expression = f"""(function () {{
      var f = document.getElementById('pick'); f.a.value = '{CPU}'; f.b.value = '{GPU}';
      f.dispatchEvent(new Event('change'));
      var torch = Array.from(document.querySelectorAll('#versions tbody tr'))
        .find(function (r) {{ return r.cells[0].textContent === 'torch'; }});
      var rows = function (id) {{ return Array.from(document.querySelectorAll('#' + id + ' tbody tr')).map(
        function (r) {{ return [r.cells[0].textContent, r.cells[1].textContent, r.cells[2].textContent]; }}); }};
      return {{curves: document.querySelectorAll('#curves polyline').length,
               torch: [torch.cells[1].textContent, torch.cells[2].textContent, torch.className],
               firstSame: document.querySelector('#versions tbody tr.same') !== null,
               presets: Array.from(f.preset.options).map(function (o) {{ return o.value; }}),
               titles: Array.from(document.querySelectorAll('h2')).map(function (h) {{ return h.textContent; }}),
               learning: rows('learning'), speed: rows('speed'), memory: rows('memory'),
               scripts: Array.from(document.querySelectorAll('script[src]')).map(
                 function (s) {{ return s.getAttribute('src'); }}).filter(function (s) {{ return s !== 'compare.js'; }}),
               yTicks: Array.from(document.querySelectorAll('#curves text')).filter(
                 function (t) {{ return t.getAttribute('text-anchor') === 'end'; }}).length}};
    }})()"""
    page = inspect_page((site / "compare.html").as_uri(), tmp_path / "compare.png", expression)
    assert page.errors == []
    v = page.value
    assert (v["curves"], v["torch"], v["firstSame"]) == (2, ["2.13.0+cpu", "2.11.0+cu130", "differs"], True)
    assert v["presets"] == ["", "smoke · tiny-gemma"]  # configurations, the verdict one picked by default
    assert v["titles"][1:] == [
        "Versions and hardware",
        "Learning: eval accuracy",
        "Speed and cost",
        "Memory",
        "Probes: measured values",
    ]
    labels = {row[0]: row[1:] for section in ("learning", "speed", "memory") for row in v[section]}
    assert [row[0] for row in v["learning"]] == [
        "eval accuracy after training (fraction correct)",
        "eval accuracy before training (fraction correct)",
    ]
    assert labels["model FLOPs utilization (% of peak)"] == ["-", "0.0015%"]
    assert labels["peak GPU memory allocated (GiB)"] == ["-", "0.08 GiB"]
    assert labels["training throughput (samples/s)"][1] == "722.2"
    assert labels["cost per 1,000 samples (USD, public GPU-hour price)"][1].startswith("$0.00")
    assert not any(name.startswith(("mfu", "peak_memory", "eval_")) for name in labels)  # no raw field names
    assert v["yTicks"] >= 5  # the loss axis has ticks, not one label at the top
    assert sorted(v["scripts"]) == sorted(f"compare/{safe_slug(k)}.js" for k in (CPU, GPU))  # loaded when picked


def test_compare_page_names_a_cell_script_that_did_not_load(db, tmp_path):
    """A picked cell whose compare/<slug>.js is missing: the page says which file, and shows no stale rows."""
    require_chromium()
    site = tmp_path / "site"
    assert invoke("report", "--db", str(db), "-o", str(site)).exit_code == 0
    missing = f"compare/{safe_slug(GPU)}.js"
    (site / missing).unlink()
    expression = f"""new Promise(function (resolve) {{
      var f = document.getElementById('pick');
      var state = function () {{ return {{runs: document.getElementById('runs').textContent,
        rows: document.querySelectorAll('tbody tr').length, curves: document.querySelectorAll('#curves *').length}}; }};
      var first = state();
      f.b.value = '{CPU}'; f.dispatchEvent(new Event('change'));  // loaded: drawn at once
      var drawn = state();
      f.b.value = '{GPU}'; f.dispatchEvent(new Event('change'));  // tried again, fails again
      (function wait(tries) {{
        var now = state();
        if (now.rows && tries < 200) {{ setTimeout(function () {{ wait(tries + 1); }}, 25); return; }}
        resolve({{first: first, drawn: drawn, again: now}});
      }})(0);
    }})"""
    page = inspect_page((site / "compare.html").as_uri(), tmp_path / "compare.png", expression)
    assert len(page.errors) == 4 and all(missing in e or "ERR_FILE_NOT_FOUND" in e for e in page.errors), page.errors
    gone = {"runs": f"could not load the runs of {GPU} ({missing})", "rows": 0, "curves": 0}
    v = page.value
    assert v["first"] == gone and v["again"] == gone
    assert v["drawn"]["runs"].startswith("A: run ") and v["drawn"]["rows"] > 10 and v["drawn"]["curves"] > 10


def test_the_gpu_cell_page_shows_its_signed_standard_speed_measurement(db, tmp_path):
    """The committed speed-preset run of the sm_90 cell is the cell's standard speed: its page shows the run's
    samples/s, MFU, GPU-hour and cost figures with the conditions and the card that measured it."""
    speed = next(
        json.loads(p.read_text())
        for p in (RESULTS / GPU).glob("*/result.json")
        if json.loads(p.read_text())["config"]["preset"] == "speed"
    )
    site = tmp_path / "site"
    assert invoke("report", "--db", str(db), "-o", str(site), "--published").exit_code == 0
    page = (site / "cells" / f"{safe_slug(GPU)}.html").read_text()
    section = page[page.index("Standard speed measurement") : page.index("Reproduce")]
    metrics = speed["metrics"]
    assert f"{metrics['samples_per_s']:,.1f}" in section and f"{metrics['mfu']:.1%}" in section
    assert f"{metrics['samples_per_s'] * 3600:,.0f}" in section and "(price of 2026-05-22)" in section
    assert "uncontended" in section and speed["run_id"] in section
    assert speed["hardware"]["gpu_name"] == "NVIDIA H100 80GB HBM3" and "NVIDIA H100 80GB HBM3" in page
    assert "signed by envbuild-gpu" in section
