"""`envbuild report`: the static site's content, that it is offline, and that it renders in Chromium."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.report.site import build_report
from builder.store.store import MatrixStore
from builder.store.summary import summarize
from builder.plan.cells import Cell
from matrix_fixtures import cpu_result, failed_result, make_result, speed_result, with_probe_failure
from report_browser import inspect_page, require_chromium
from site_files import index_pages

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ROCM_KEY = "rocm6.2-torch2.4-gfx90a-py3.10"
CPU_KEY = "cpu-torch2.13-py3.11"
FAIL_KEY = "rocm6.1.2-torch2.3-gfx942-py3.10"
BUILD_FAIL_KEY = "rocm6.2-torch2.5-gfx942-py3.10"
UNTESTED = Cell(flavor="rocm", accel_version="6.2", torch="2.5", arch="gfx90a", python="3.10")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A report over pass, partial, fail (run), fail (build) and untested cells."""
    tmp = tmp_path_factory.mktemp("report")
    fail_cell = {"flavor": "rocm", "accel_version": "6.1.2", "torch": "2.3", "arch": "gfx942", "python": "3.10"}
    with MatrixStore.open(tmp / "m.db") as store:
        store.record_run(
            make_result(
                finished_at="2026-12-01T10:00:00Z", image={"tag": "envbuild/rocm:abc", "digest": "sha256:" + "d" * 64}
            )
        )
        store.record_run(failed_result("nan_loss", "loss became NaN at step 3", finished_at="2026-12-01T18:00:00Z"))
        run_dir = tmp / "envbuild-attempts" / "20261202T100000Z-run-3f2c9a1b7d4e"  # what `envbuild run` keeps
        run_dir.mkdir(parents=True)
        (run_dir / "container.log").write_text("step 1 loss 1.95\nstep 4 loss 0.90\n")
        store.record_run(
            make_result(finished_at="2026-12-02T10:00:00Z"),
            source=str(run_dir / "result.json"),
            attempt_dir=str(run_dir.relative_to(tmp)),
        )
        build_dir = tmp / "envbuild-attempts" / "20261201T090000Z-build-0c6b44a51eb1"
        build_dir.mkdir(parents=True)
        (build_dir / "build.log").write_text("#1 [internal] load build definition\n")
        store.record_build(
            Cell(flavor="rocm", accel_version="6.2", torch="2.4", arch="gfx90a", python="3.10"),
            status="pass",
            image_tag="envbuild/rocm:abc",
            image_digest="sha256:" + "d" * 64,
            duration_s=321.0,
            log_path=build_dir / "build.log",
            created_at="2026-12-01T09:00:00Z",
            attempt_dir=str(build_dir.relative_to(tmp)),
            manifest={
                "cell": {"flavor": "rocm", "accel_version": "6.2", "torch": "2.4", "arch": "gfx90a", "python": "3.10"},
                "torch": {"git": {"proof": "unproven"}},
            },
        )  # rendered with --unproven
        store.record_run(with_probe_failure(cpu_result()))
        store.record_run(
            failed_result("oom", "HIP out of memory <tried 2 GiB>", image={"manifest": {"cell": fail_cell}})
        )
        store.record_build(
            Cell(flavor="rocm", accel_version="6.2", torch="2.5", arch="gfx942", python="3.10"),
            status="fail",
            failure_class="network",
            error="pip could not reach the index",
        )
        # the standard speed measurement, on two days: the cell's speed numbers and its throughput plot
        store.record_run(speed_result(finished_at="2026-11-30T10:00:00Z"))
        store.record_run(speed_result(finished_at="2026-12-01T11:00:00Z"))
        summaries = summarize(store, [UNTESTED])
        out = tmp / "site"
        index = build_report(store, summaries, out, generated_at="2026-12-02T14:00:00Z")
    return out, index


def test_site_has_pages_plots_summary_and_data(site):
    out, index = site
    assert index == out / "index.html"
    for key in (ROCM_KEY, CPU_KEY, FAIL_KEY, BUILD_FAIL_KEY, UNTESTED.key):
        assert (out / "cells" / f"{key}.html").is_file()
    for name, labels in (
        ("curves", ("optimizer step", "loss (nats per token)")),
        ("accuracy", ("score (fraction, 1 = perfect)",)),
        ("throughput", ("samples/s", "MFU (% of peak)", "run day (2026, MM-DD, UTC)")),
    ):
        svg = (out / "plots" / f"{ROCM_KEY}-{name}.svg").read_text()
        assert svg.startswith("<svg") and all(f">{label}</text>" in svg for label in labels), name
    assert not (out / "plots" / f"{UNTESTED.key}-curves.svg").exists()
    data = json.loads((out / "data.json").read_text())
    status = {c["key"]: (c["status"], c["failure_class"]) for c in data["cells"]}
    assert status == {
        ROCM_KEY: ("pass", None),
        CPU_KEY: ("partial", None),
        FAIL_KEY: ("fail", "oom"),
        BUILD_FAIL_KEY: ("fail", "build:network"),
        UNTESTED.key: ("untested", None),
    }
    cell_data = json.loads((out / "data" / f"{ROCM_KEY}.json").read_text())
    assert len(cell_data["runs"]) == 5 and len(cell_data["history"]) == 5
    summary = (out / "summary.md").read_text()
    assert "2 pass" not in summary and "1 pass, 1 partial (passed with probe warnings), 2 fail, 1 untested" in summary
    # no speed preset run: no speed numbers (the smoke run's 52.1 samples/s are never the cell's speed)
    assert (
        f"| [{FAIL_KEY}](cells/{FAIL_KEY}.html) | fail | 5/6 verdict on hardware | none | 2026-12-02 13:00 |"
        " AMD Instinct MI250X × 1 | - | – | - | - | 1 | unsigned, imported locally |"
        " oom: HIP out of memory &lt;tried 2 GiB&gt; |"
    ) in summary
    # samples per GPU-hour from the speed run's samples/s x 3600 / GPUs; no cost: gpu-prices.toml has no MI250X price
    assert " | 612.5 | 40.7% | 2,205,000 | - | 3 | unsigned, imported locally | - |" in summary


def test_grid_shows_every_cell_with_status_class_and_note(site):
    out, _ = site
    html = (out / "index.html").read_text()
    entries = dict(re.findall(r'data-cell="([^"]+)" data-status="([^"]+)"', html))
    assert entries == {
        ROCM_KEY: "pass",
        CPU_KEY: "partial",
        FAIL_KEY: "fail",
        BUILD_FAIL_KEY: "fail",
        UNTESTED.key: "untested",
    }
    assert "HIP out of memory &lt;tried 2 GiB&gt;" in html  # notes are escaped
    assert "build:network" in html and "probe warnings: sdpa_vs_math" in html
    for torch in ("2.3", "2.4", "2.5", "2.13"):
        assert f"<th>torch {torch}</th>" in html
    rows = {key: row for key, row in re.findall(r'<tr data-cell="([^"]+)".*?>(.*?)</tr>', html, re.S)}
    assert "CPU only" in rows[CPU_KEY] and "cpu cpu" not in html and "× 0" not in html
    assert re.search(r"flaky.*AMD Instinct MI250X × 1.*612\.5.*40\.7%.*3 · 2026-12-02 10:00", rows[ROCM_KEY], re.S)
    assert "flaky" not in rows[FAIL_KEY] and ">official wheel" in rows[CPU_KEY].replace("\n", "")
    assert "52.1" not in rows[ROCM_KEY]  # the smoke run's speed is never the cell's
    assert ">none" in rows[ROCM_KEY] and "https://rocm.docs.amd.com/" in rows[ROCM_KEY]


def test_cell_page_shows_digest_probes_versions_and_history(site):
    out, _ = site
    html = (out / "cells" / f"{ROCM_KEY}.html").read_text()
    assert "plots/" + ROCM_KEY + "-curves.svg" in html and "0.140 → 0.710" in html and "40.7%" in html
    assert "2.4.1+rocm6.2" in html and "sdpa_vs_math" in html
    assert "last pass 2026-12-02T10:00:00Z" in html and "3 verdict(s), 2 measurement(s), 0 attempt(s)" in html
    assert "sha256:" + "d" * 64 in html  # from the older run: the newest run carries no image block
    # torch 2.4 on ROCm 6.2 resolves (a source build, by default), so the page offers the command that builds it
    assert "envbuild image --rocm 6.2 --torch 2.4 --arch gfx90a --python 3.10" in html
    assert "envbuild run workload --image envbuild/rocm:abc --gpus all" in html
    logs = re.findall(r'href="\.\./(logs/[^"]+)">log<', html)
    assert len(logs) == 2 and {(out / log).read_text()[:4] for log in logs} == {"step", "#1 ["}
    assert '<span class="flaky">flaky</span>' in html and "device_count</td><td><code>1</code>" in html
    fail = (out / "cells" / f"{FAIL_KEY}.html").read_text()
    assert "oom" in fail and "HIP out of memory" in fail


def test_site_references_nothing_outside_itself(site):
    out, _ = site
    for page in [*out.glob("*.html"), *out.glob("cells/*.html"), out / "style.css"]:
        text = page.read_text()
        assert not re.search(r"src=\"(https?:)?//", text), page  # nothing is loaded from elsewhere
        cited = re.findall(r'href="((?:https?:)?//[^"]*)"', text)  # links out: only the vendor sources cited
        assert all(url.startswith(("https://rocm.docs.amd.com/", "https://download.pytorch.org/")) for url in cited), (
            page
        )
        assert "@import" not in text and "url(" not in text, page
        for ref in re.findall(r'(?:src|href)="(?!https://)([^"#]+)"', text):
            assert (page.parent / ref).resolve().exists(), f"{page.name} links to missing {ref}"


def test_report_command_writes_the_site(tmp_path):
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        store.record_run(cpu_result())
    result = CliRunner().invoke(main, ["report", "-o", str(tmp_path / "site"), "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert f"cells/{CPU_KEY}.html" in index_pages(tmp_path / "site")


@pytest.mark.slow
def test_index_renders_in_headless_chromium_without_console_errors(site, tmp_path):
    require_chromium()
    out, index = site
    shot = tmp_path / "index.png"
    page = inspect_page(
        index.as_uri(),
        shot,
        "({entries: Array.from(document.querySelectorAll("
        "'#matrix-grid a.entry')).map(a => a.dataset.status), title: document.title})",
    )
    assert page.errors == []
    assert sorted(page.value["entries"]) == ["fail", "fail", "partial", "pass", "untested"]
    assert shot.read_bytes().startswith(PNG_MAGIC) and shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")


@pytest.mark.slow
def test_cell_page_renders_with_its_plots_loaded(site, tmp_path):
    require_chromium()
    out, _ = site
    shot = tmp_path / "cell.png"
    page = inspect_page(
        (out / "cells" / f"{ROCM_KEY}.html").as_uri(),
        shot,
        "Array.from(document.images).map(i => i.complete && i.naturalWidth > 0)",
    )
    assert page.errors == []
    assert page.value == [True, True, True]
    print(f"screenshot: {shot}")


@pytest.mark.slow
def test_index_filters_by_arch_rocm_release_and_status(site, tmp_path):
    require_chromium()
    _, index = site
    shot = tmp_path / "filtered.png"
    page = inspect_page(index.as_uri(), shot, _FILTER_SCRIPT)
    assert page.errors == []
    v = page.value
    assert len(v["all"]) == 5 and v["shown_all"] == "5 of 5 cells"
    assert sorted(v["status=fail"]) == sorted([FAIL_KEY, BUILD_FAIL_KEY]) and v["grid_fail"] == 2
    assert sorted(v["arch=gfx942"]) == sorted([FAIL_KEY, BUILD_FAIL_KEY])
    assert v["release=cpu"] == [CPU_KEY] and v["shown_cpu"] == "1 of 5 cells" and v["grid_rows_cpu"] == 1
    assert v["release=rocm 6.2&status=untested"] == [UNTESTED.key]
    # options per flavor: the ROCm group offers ROCm releases only, the CPU reference is its own group
    assert v["groups"] == {"ROCm": ["ROCm 6.1.2", "ROCm 6.2"], "CPU": ["CPU CPU reference"]}
    print(f"screenshot (filtered to ROCm 6.2): {shot}")


_FILTER_SCRIPT = """(() => {
  const f = document.getElementById('filters');
  const set = (arch, release, status) => { f.arch.value = arch; f.release.value = release; f.status.value = status;
                                       f.dispatchEvent(new Event('change')); };
  const rows = () => Array.from(document.querySelectorAll('#cells tbody tr')).filter(r => !r.hidden).map(r => r.dataset.cell);
  const grid = () => Array.from(document.querySelectorAll('#matrix-grid a.entry')).filter(a => !a.hidden).length;
  const gridRows = () => Array.from(document.querySelectorAll('#matrix-grid tbody tr')).filter(r => !r.hidden).length;
  const out = {all: rows(), shown_all: document.getElementById('shown').textContent};
  set('', '', 'fail'); out['status=fail'] = rows(); out.grid_fail = grid();
  set('gfx942', '', ''); out['arch=gfx942'] = rows();
  set('', 'cpu', ''); out['release=cpu'] = rows(); out.shown_cpu = document.getElementById('shown').textContent;
  out.grid_rows_cpu = gridRows();
  set('', 'rocm 6.2', 'untested'); out['release=rocm 6.2&status=untested'] = rows();
  out.groups = Object.fromEntries(Array.from(f.release.querySelectorAll('optgroup')).map(
    g => [g.label, Array.from(g.querySelectorAll('option')).map(o => o.textContent)]));
  set('', 'rocm 6.2', '');
  return out;
})()"""


def test_a_cell_built_from_an_unproven_source_says_so_everywhere(site):
    """A torch source build rendered with --unproven is marked in the index, the cell
    page, summary.md and data.json; other cells are not."""
    out, index = site
    html = index.read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r'<tr data-cell="([^"]+)".*?</tr>', html, re.S)}
    assert '<span class="unproven"' in rows[ROCM_KEY] and "unproven" not in rows[CPU_KEY]
    assert '<span class="unproven"' in (out / "cells" / f"{ROCM_KEY}.html").read_text()
    assert '<span class="unproven"' not in (out / "cells" / f"{CPU_KEY}.html").read_text()
    assert re.search(
        r"rocm6\.2-torch2\.4-gfx90a-py3\.10\.html\) \| pass[^|]* \(unproven source\) \|",
        (out / "summary.md").read_text(),
    )
    flags = {c["key"]: c["unproven"] for c in json.loads((out / "data.json").read_text())["cells"]}
    assert flags[ROCM_KEY] is True and not any(v for k, v in flags.items() if k != ROCM_KEY)


def test_the_recipes_new_cells_are_untested_rows_grouped_by_release_with_both_vendor_claims(tmp_path):
    """Every cell the recipes define and no run has measured shows as untested in a row of its release; a 7.2
    cell with an official wheel says what AMD's table lists and that PyTorch ships the wheel ("wheel only")."""
    from builder.plan.recipe_cells import Selection, recipe_cells

    cells = recipe_cells(Selection(flavors=("rocm",), archs=("gfx942",)))
    new = [c for c in cells if c.accel_version in ("6.2.4", "6.3", "6.4", "7.0", "7.1", "7.2")]
    assert {c.accel_version for c in new} == {"6.2.4", "6.3", "6.4", "7.0", "7.1", "7.2"}
    with MatrixStore.open(tmp_path / "m.db") as store:
        summaries = summarize(store, cells)
        build_report(store, summaries, tmp_path / "site", generated_at="2026-12-04T20:00:00Z")
    page = (tmp_path / "site" / "index.html").read_text()
    labels = re.findall(r'<th scope="row">([^<]+)</th>', page)
    assert labels == sorted(labels, key=lambda label: [int(x) for x in re.findall(r"\d+", label.split("·")[0])])
    assert "ROCm 7.2 · gfx942 (MI300A, MI300X, MI325X)" in labels, labels  # the arch's GPU names beside it
    data = {c["key"]: c for c in json.loads((tmp_path / "site" / "data.json").read_text())["cells"]}
    cell = data["rocm7.2-torch2.11-gfx942-py3.12"]
    assert cell["status"] == "untested"
    row = re.search(r'<tr data-cell="rocm7.2-torch2.11-gfx942-py3.12".*?</tr>', page, re.S).group(0)
    assert 'class="vendor wheel-only"' in row and "PyTorch: official wheel torch 2.11.0+rocm7.2" in row
