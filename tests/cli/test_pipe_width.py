"""Piped output is never cut at 80 columns: `recipes list`, `matrix show` and `matrix diff` print every value whole
when stdout is a pipe (builder/cli/output.py), and the diff's tables have no empty column. Real subprocesses with a
real pipe, on the committed results/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CPU, GPU = "cpu-torch2.13-py3.11", "cuda13.0-torch2.11-sm_90-py3.12"
CPU_DIGEST = "sha256:a15c3eff7cb373a10f9b13bb6fae0ca1c62774260d5809bdafe0f59e3907636f"


def piped(*args: str) -> str:
    """`envbuild ARGS` with stdout a pipe and no COLUMNS (what `| grep` or `> file` gives)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", "from builder.cli import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pipe") / "m.db"
    piped("matrix", "import", "--db", str(path), str(REPO / "results"))
    return path


def test_recipes_list_piped_keeps_every_reason_and_source_whole():
    rows = json.loads(piped("recipes", "list", "--json"))
    text = piped("recipes", "list")
    assert "…" not in text
    assert max(len(r["reason"]) + len(r["fact_source"]) for r in rows) > 80  # 80 columns would have cut them
    for row in rows:
        assert row["reason"] in text and row["fact_source"] in text, row["cell"]


def test_matrix_show_piped_keeps_long_values_whole(db):
    text = piped("matrix", "show", CPU, "--db", str(db))
    assert CPU_DIGEST in text and "…" not in text
    assert any(len(line) > 80 for line in text.splitlines())


def test_matrix_diff_piped_keeps_values_whole_and_has_no_empty_column(db):
    text = piped("matrix", "diff", CPU, GPU, "--db", str(db), "--all")
    assert CPU_DIGEST in text  # one line, not folded at 80 columns
    headers = [line for line in text.splitlines() if line.startswith("┃")]
    assert headers, text
    for header in headers:  # no section (none of these has a probe outside its limit) ends in an empty column
        cells = [c.strip() for c in header.strip("┃").split("┃")]
        assert cells[-1] == "B/A" and "" not in cells, header
