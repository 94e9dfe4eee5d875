"""Each cell's ladder (builder/report/ladder.py) in the report's grid, cells table and cell page: from the real
recipes and a real SQLite matrix file."""

from __future__ import annotations

import html as html_lib
import re

import pytest

from builder.report.site import build_report
from builder.store.store import MatrixStore
from builder.store.summary import summarize
from builder.plan.cells import Cell
from builder.plan.recipe_cells import recipe_cells
from matrix_fixtures import make_result, speed_result

UNTESTED = (
    "rocm6.2-torch2.5-gfx90a-py3.10"  # an official PyTorch wheel (torch==2.5.1+rocm6.2); AMD's table: 2.3 at most
)
FULL = "rocm6.2-torch2.4-gfx90a-py3.10"  # the fixtures' cell: built, verified, verdict and speed recorded
FULL_CELL = Cell(flavor="rocm", accel_version="6.2", torch="2.4", arch="gfx90a", python="3.10")
CONTENDED = {
    "contended": True,
    "contention": ["another envbuild run was writing to this matrix"],
    "load_average": {"start": 0.5, "end": 3.9},
    "cpu_count": 2,
    "other_envbuild_runs": 1,
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ladder")
    with MatrixStore.open(tmp / "m.db") as store:
        store.record_build(
            FULL_CELL,
            status="pass",
            image_tag="envbuild/rocm:abc",
            image_digest="sha256:" + "d" * 64,
            duration_s=300.0,
            created_at="2026-12-01T09:00:00Z",
            manifest={"cell": FULL_CELL.model_dump(), "verify": {"checks": ["torch", "hip", "pins"]}},
        )
        store.record_run(
            make_result(
                finished_at="2026-12-01T10:00:00Z", image={"tag": "envbuild/rocm:abc", "digest": "sha256:" + "d" * 64}
            )
        )
        store.record_run(speed_result(finished_at="2026-12-01T11:00:00Z"))
        store.record_run(speed_result(finished_at="2026-12-02T11:00:00Z", conditions=CONTENDED))
        summaries = summarize(store, recipe_cells())
        build_report(store, summaries, tmp / "site", generated_at="2026-12-02T14:00:00Z")
    return tmp / "site"


def steps(page: str) -> dict[int, tuple[str, str]]:
    """step number -> (state, what our records show) of a cell page's ladder table."""
    table = page.split('id="ladder-steps"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r'data-step="(\d)" data-state="([^"]+)">.*?</td><td>.*?</td><td>(.*?)</td>', table, re.S)
    return {int(n): (state, html_lib.unescape(detail)) for n, state, detail in rows}


def test_an_official_wheel_cell_with_no_run_shows_the_vendor_claim_and_step_2(site):
    page = (site / "cells" / f"{UNTESTED}.html").read_text()
    ladder = steps(page)
    assert ladder[1][0] == "done" and "PyTorch publishes the official wheel torch==2.5.1+rocm6.2" in ladder[1][1]
    assert ladder[2] == (
        "done",
        "every input pinned by the recipes; dependencies locked with hashes in recipes/locks/torch2.5-py3.10.txt",
    )
    assert [ladder[n][0] for n in range(3, 7)] == ["open"] * 4
    claim = html_lib.unescape(page.split('id="vendor-claim">', 1)[1].split("</td>", 1)[0])
    assert claim.startswith("official wheel — ") and not claim.startswith("not listed")
    commands = html_lib.unescape(page.split('id="next-commands">', 1)[1].split("</pre>", 1)[0])
    assert "envbuild image --rocm 6.2 --torch 2.5 --arch gfx90a --python 3.10" in commands
    assert "envbuild run workload --image TAG --gpus all --preset speed" in commands
    assert 'href="../contributing.html"' in page and (site / "contributing.html").is_file()
    index = (site / "index.html").read_text()
    entry = re.search(rf'data-cell="{UNTESTED}".*?</a>', index, re.S).group(0)
    assert "2/6 renders and locks" in entry
    row = re.search(rf'<tr data-cell="{UNTESTED}".*?</tr>', index, re.S).group(0)
    assert ">official wheel" in row and "not listed" not in row


def test_a_measured_cell_climbs_to_step_6_with_evidence_and_signers(site):
    page = (site / "cells" / f"{FULL}.html").read_text()
    ladder = steps(page)
    assert ladder[3][0] == "done" and "built 2026-12-01T09:00:00Z as envbuild/rocm:abc" in ladder[3][1]
    assert ladder[4] == ("done", "3 checks passed in the image at the end of its build (no GPU)")
    assert ladder[5][0] == "done" and ladder[5][1].startswith("pass on AMD Instinct MI250X")
    assert "unsigned, imported locally" in page.split('data-step="5"', 1)[1].split("</tr>", 1)[0]
    # the newest speed run was contended: shown, and marked, everywhere its numbers appear
    assert ladder[6][0] == "done" and "612.5 samples/s" in ladder[6][1] and "CONTENDED" in ladder[6][1]
    speed = page.split('id="speed-table"', 1)[1].split("</table>", 1)[0]
    assert "612.5" in speed and "40.7%" in speed and "another envbuild run was writing" in speed
    assert 'id="speed">' in page and '<span class="contended">contended</span>' in page.split('id="speed"', 1)[1][:300]
    row = re.search(rf'<tr data-cell="{FULL}".*?</tr>', (site / "index.html").read_text(), re.S).group(0)
    assert "6/6 standard speed measured" in row and "612.5" in row and ">contended<" in row
    assert "52.1" not in row  # the smoke verdict's tiny-model speed is never the cell's


def test_a_contended_measurement_is_never_plotted(site):
    svg = (site / "plots" / f"{FULL}-throughput.svg").read_text()
    # one uncontended speed run (2026-12-01) is plotted; the contended one of 2026-12-02 is not
    assert "12-01" in svg and "12-02" not in svg


def test_a_local_cell_is_told_to_run_the_speed_preset_locally(tmp_path):
    """A cell measured with `run workload --local` (no image): steps 3 and 4 do not apply, and the next command
    runs the speed preset the same way."""
    from matrix_fixtures import cpu_result

    with MatrixStore.open(tmp_path / "m.db") as store:
        store.record_run(cpu_result(finished_at="2026-12-01T10:00:00Z"))
        build_report(store, summarize(store), tmp_path / "site", generated_at="2026-12-02T14:00:00Z")
    page = (tmp_path / "site" / "cells" / "cpu-torch2.13-py3.11.html").read_text()
    ladder = steps(page)
    assert (ladder[3][0], ladder[4][0], ladder[5][0], ladder[6][0]) == ("n/a", "n/a", "done", "open")
    commands = html_lib.unescape(page.split('id="next-commands">', 1)[1].split("</pre>", 1)[0])
    assert commands.splitlines()[0] == "envbuild run workload --local --preset speed"


def test_the_ladder_links_only_https_urls_of_the_recipes_grammar():
    """A vendor source or a wheel index that is not an https:// URL of the grammar is shown as text, never linked
    (an `href="javascript:…"` runs on a click)."""
    from builder.report import ladder as cell_ladder
    from builder.report.vendor_support import VendorSupport

    good = "https://rocm.docs.amd.com/en/docs-6.2.0/compatibility.html"
    bad = ["javascript:alert(1)", "http://plain.example/", "https://user@evil.example/", "https://x.org/\x1b[2J"]
    vendor = VendorSupport("listed", "AMD: lists it", (good, *bad))
    recipe = cell_ladder.Recipe("wheel", "torch==2.5.1+rocm6.2", "javascript:alert(2)//rocm6.2", "lock.txt", True)
    first = cell_ladder.ladder(FULL_CELL, vendor, recipe, [], None, None, None, None).steps[0]
    assert [ev.href for ev in first.evidence if ev.href] == [good]
    assert [ev.text for ev in first.evidence if not ev.href] == [
        *(f"AMD docs: {url}" for url in bad),
        "PyTorch wheel index: javascript:alert(2)//rocm6.2",
    ]


def test_the_next_step_is_one_a_contributor_can_take(tmp_path):
    """A cell no vendor claims (here a `--local` cell the recipes do not know) has step 1 open, which no
    contributor can take: the page names the first step its commands take instead, never "vendor claims"."""
    from matrix_fixtures import cpu_result

    versions = dict(cpu_result()["versions"], torch="2.14.0+cpu", python="3.12.1")
    with MatrixStore.open(tmp_path / "m.db") as store:
        store.record_run(cpu_result(finished_at="2026-12-01T10:00:00Z", versions=versions))
        build_report(store, summarize(store), tmp_path / "site", generated_at="2026-12-02T14:00:00Z")
    page = html_lib.unescape((tmp_path / "site" / "cells" / "cpu-torch2.14-py3.12.html").read_text())
    assert steps(page)[1][0] == "open"
    commands = page.split('id="next-commands">', 1)[1].split("</pre>", 1)[0]
    assert commands.splitlines()[0] == "envbuild run workload --local --preset speed"
    assert "(next: step 6, standard speed measured):" in page
    assert "vendor claims)" not in page


def test_a_contended_verdict_run_is_marked_on_its_cell_page(tmp_path):
    """`envbuild run workload` says a run taken while another wrote to the matrix "will be marked contended": the
    cell page marks it where its numbers appear (latest run, training, other configurations), with the reasons."""
    from matrix_fixtures import cpu_result

    shorter = {"argv": ["train", "--max-steps", "6"], "overrides": {"max_steps": 6}}
    with MatrixStore.open(tmp_path / "m.db") as store:
        store.record_run(cpu_result(finished_at="2026-12-01T10:00:00Z", conditions=CONTENDED))
        store.record_run(cpu_result(finished_at="2026-12-01T11:00:00Z", conditions=CONTENDED, invocation=shorter))
        build_report(store, summarize(store), tmp_path / "site", generated_at="2026-12-02T14:00:00Z")
    page = (tmp_path / "site" / "cells" / "cpu-torch2.13-py3.11.html").read_text()
    latest = page.split("<h2>Latest run</h2>", 1)[1].split("</p>", 1)[0]
    assert 'id="latest-contended"' in latest and "another envbuild run was writing to this matrix" in latest
    assert '<span class="contended"' in page.split('id="training"', 1)[1].split("</h2>", 1)[0]
    other = page.split('id="measurements"', 1)[1].split("</table>", 1)[0]
    assert '<span class="contended"' in other
