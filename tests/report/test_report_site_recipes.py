"""The report reads the site's recipe folder the CLI was given (`envbuild --recipes DIR report`): a cell the site
adds is shown with its route and lock, as `render` would build it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from repo import REPO_ROOT


def test_a_cell_the_site_adds_is_shown_rendering_with_its_lock(tmp_path):
    packaged = (REPO_ROOT / "recipes" / "rocm.toml").read_text()
    start = packaged.index('[release."6.2"]')
    block = packaged[start : packaged.find("\n[", start + 1)].replace('[release."6.2"]', '[release."6.2.9"]')
    block = re.sub(r'base_image = "[^"]+"', 'base_image = "registry.example.org/site/rocm:6.2.9"', block)
    site = tmp_path / "site"
    site.mkdir()
    (site / "rocm.toml").write_text(block + "\n")
    environment = {k: v for k, v in os.environ.items() if k not in ("ENVBUILD_RECIPES", "ENVBUILD_DB")}
    report = subprocess.run(
        [sys.executable, "-m", "builder", "--recipes", str(site), "report", "-o", str(tmp_path / "out")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**environment, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "out" / "cells" / "rocm6.2.9-torch2.5-gfx90a-py3.10.html").read_text()
    step = re.search(r'<tr class="step-\w+" data-step="2" data-state="(\w+)">.*?</td>\s*<td>([^<]*)', page, re.S)
    assert step and step.group(1) == "done", page[:3000]
    assert "recipes/locks/torch2.5-py3.10.txt" in page
