"""The report says what the public record holds against a cell's GPU arch on its release (TheRock's "Build Passing",
the MI250 failure report on ROCm 7.14) on the cell's page and on its GPU's answer page, and names AMD's torch as
AMD's build where the recipes take it from AMD's index."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from builder.cli import main
from matrix_fixtures import make_result


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("caveats")
    db, out, result = tmp / "m.db", tmp / "site", tmp / "result.json"
    result.write_text(json.dumps(make_result()))
    assert CliRunner().invoke(main, ["matrix", "import", str(result), "--db", str(db)]).exit_code == 0
    made = CliRunner().invoke(main, ["report", "-o", str(out), "--db", str(db), "--no-results"])
    assert made.exit_code == 0, made.output
    return out


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).replace("&#34;", '"').replace("&#39;", "'").split())


def test_the_cell_page_of_mi250x_on_rocm_7_14_shows_its_status_and_the_failure_record(site):
    page = (site / "cells" / "rocm7.14-torch2.14-gfx90a-py3.12.html").read_text()
    assert 'id="arch-caveats"' in page
    text = _text(page)
    assert "What the public record says about gfx90a on ROCm 7.14" in text
    assert 'gfx90a is "Build Passing" in TheRock, which built ROCm 7.14' in text
    assert "ROCm/pytorch#3518" in text and "hipErrorInvalidImage" in text
    ready = (site / "cells" / "rocm7.14-torch2.14-gfx942-py3.12.html").read_text()
    assert 'id="arch-caveats"' not in ready  # gfx942 is Release-Ready there, with no record


def test_the_gpu_answer_page_lists_the_caveats_per_release_and_marks_the_cells(site):
    page = (site / "gpus" / "MI250X.html").read_text()
    (block,) = re.findall(r'<ul class="caveats" id="gpu-caveats">(.*?)\n</ul>', page, re.S)
    releases = re.findall(r'<li data-release="([^"]+)">', block)
    assert releases == ["ROCm 7.14", "ROCm 7.14.1", "ROCm 10.0", "ROCm 10.1"]
    assert "ROCm/TheRock#7081" in block and "SUPPORTED_GPUS.md @f51dc6c" in block
    row = re.search(r'<tr data-cell="rocm10.1-torch2.14-gfx90a-py3.12">.*?</tr>', page, re.S).group(0)
    assert '<td class="caveat"><a href="#caveats">1</a></td>' in row
    old = re.search(r'<tr data-cell="rocm6.2-torch2.5-gfx90a-py3.10">.*?</tr>', page, re.S).group(0)
    assert '<td class="caveat">-</td>' in old
    assert 'id="gpu-caveats"' not in (site / "gpus" / "MI300X.html").read_text()


def test_amds_torch_is_amds_build_on_the_cell_page(site):
    text = _text((site / "cells" / "rocm10.1-torch2.14-gfx90a-py3.12.html").read_text())
    assert "AMD publishes its own build of torch, torch==2.14.0+rocm10.1.0, on its index (not PyTorch's)" in text
    assert "AMD: its own build of torch, torch 2.14.0+rocm10.1.0, on its index (not PyTorch's)" in text
    assert "AMD's wheel" in text and "PyTorch publishes the official wheel" not in text
    pytorch = _text((site / "cells" / "rocm7.2-torch2.14-gfx90a-py3.12.html").read_text())
    assert "PyTorch publishes the official wheel torch==2.14.0+rocm7.2" in pytorch
