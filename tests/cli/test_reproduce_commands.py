"""The commands a cell page prints work: the image command of every committed cell plans that cell's image
(`--dry-run`, the CUDA cell included), and the run command a run
recorded makes a run of the same cell and configuration again."""

from __future__ import annotations

import html
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ENVBUILD = [sys.executable, "-c", "from builder.cli import main; main()"]
RESULTS = Path(__file__).resolve().parents[2] / "results"


def envbuild(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*ENVBUILD, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def _pre(page: str, ident: str) -> list[str]:
    found = re.search(rf'<pre class="cmd" id="{ident}">(.*?)</pre>', page, re.S)
    return [html.unescape(line) for line in found.group(1).splitlines() if line.strip()] if found else []


@pytest.fixture(scope="module")
def committed_site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("committed")
    db, site = tmp / "m.db", tmp / "site"
    assert envbuild(["matrix", "import", str(RESULTS), "--db", str(db)], tmp).returncode == 0
    report = envbuild(["report", "-o", str(site), "--db", str(db), "--no-recipes"], tmp)
    assert report.returncode == 0, report.stderr
    return tmp, site


@pytest.mark.parametrize("key", ["cpu-torch2.13-py3.11", "cuda13.0-torch2.11-sm_90-py3.12"])
def test_the_printed_image_command_plans_the_same_cell(committed_site, key):
    tmp, site = committed_site
    page = (site / "cells" / f"{key}.html").read_text()
    image_command = _pre(page, "reproduce")[0]
    argv = shlex.split(image_command)
    assert argv[:2] == ["envbuild", "image"]
    planned = envbuild([*argv[1:], "--dry-run"], tmp)
    assert planned.returncode == 0, planned.stdout[-1500:] + planned.stderr[-1500:]
    assert re.search(rf"image tag:\s+envbuild/{re.escape(key)}:[0-9a-f]{{12}}", planned.stdout), planned.stdout[-1500:]


def test_the_gpu_cell_prints_the_local_command_its_verdict_run_recorded(committed_site):
    """The sm_90 cell's newest verdict run (the H100's) recorded its command; the older H200 run, written before
    commands were kept, would be rebuilt from its result instead."""
    _, site = committed_site
    page = (site / "cells" / "cuda13.0-torch2.11-sm_90-py3.12.html").read_text()
    assert _pre(page, "recorded-command") == ["envbuild run workload --local --preset smoke --model tiny-gemma"]
    assert "The command the latest verdict run recorded" in page and "rebuilt from its result" not in page


def test_the_command_a_run_recorded_makes_the_same_cell_and_configuration(tmp_path):
    data = tmp_path / "two.jsonl"
    rows = [{"text": f"{word} text {i}", "label": word} for word in ("up", "down") for i in range(8)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first = envbuild(
        [
            "run",
            "workload",
            "--local",
            "--data",
            str(data),
            "--out",
            str(tmp_path / "a"),
            "--db",
            str(tmp_path / "m.db"),
            "--",
            "--labels",
            "auto",
            "--max-steps",
            "2",
            "--no-probes",
        ],
        tmp_path,
    )
    assert first.returncode in (0, 1), first.stderr[-2000:]
    site = tmp_path / "site"
    assert (
        envbuild(["report", "-o", str(site), "--db", str(tmp_path / "m.db"), "--no-recipes"], tmp_path).returncode == 0
    )
    page = (site / "cells" / "cpu-torch2.13-py3.11.html").read_text()
    printed = html.unescape(re.search(r'id="measurements".*?<code>([^<]*)</code>', page, re.S).group(1))
    assert printed == (
        "envbuild run workload --local --preset smoke --data two.jsonl -- --labels auto --max-steps 2 --no-probes"
    )
    again_dir = tmp_path / "again"
    again_dir.mkdir()
    shutil.copy(data, again_dir / "two.jsonl")  # the command names the data file; it runs where the file is
    argv = shlex.split(printed)
    split = argv.index("--")
    again = envbuild([*argv[1:split], "--out", str(again_dir / "out"), "--no-record", *argv[split:]], again_dir)
    assert again.returncode in (0, 1), again.stderr[-2000:]
    one = json.loads((tmp_path / "a" / "result.json").read_text())
    two = json.loads((again_dir / "out" / "result.json").read_text())
    assert one["versions"] == two["versions"] and one["hardware"] == two["hardware"]
    for key in ("preset", "model", "data", "overrides", "probes", "envbuild"):
        assert one["invocation"][key] == two["invocation"][key], key
