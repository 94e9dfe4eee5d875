"""One hostile result through every output: index.html, a cell page, summary.md, data files and the terminal."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.report.site import build_report, ReportError
from builder.store.store import MatrixStore
from builder.store.summary import summarize
from matrix_fixtures import make_result
from site_files import compare_scripts

EVIL = '<script>alert(1)</script> | pipe\nnext line "quoted" & amp [/] [bold] ../../escape \x1b[31mred'
KEY = "rocm6.2-torch2.4-gfx90a-py3.10"
SECRET_HOST, SECRET_CMDLINE = "secret-host.example", "BOOT_IMAGE=/vmlinuz-secret root=UUID=1234"


def _hostile() -> dict:
    result = make_result(status="fail", error_class=EVIL, error=EVIL, image={"tag": EVIL, "digest": EVIL})
    result["versions"]["transformers"] = EVIL
    result["hardware"]["gpu_name"] = EVIL
    result["model"]["id"] = EVIL
    result["probes"] = [{"name": EVIL, "status": "fail", "message": EVIL, "values": {EVIL: EVIL, "n": 3}}]
    result["host"] = {
        "hostname": SECRET_HOST,
        "kernel_cmdline": SECRET_CMDLINE,
        "kernel": "6.8.0-45-generic",
        "amdgpu_version": "6.8.5",
        "os": EVIL,
        "gpus": [{"node": 1, "arch": "gfx90a"}],
        "gpu_archs": ["gfx90a"],
    }
    return result


class _Scripts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.scripts: list[dict] = []
        self.handlers: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self.scripts.append(dict(attrs))
        self.handlers += [name for name, _ in attrs if name.startswith("on")]


def _check_html(text: str, allowed_scripts: list[str]) -> None:
    parser = _Scripts()
    parser.feed(text)
    assert [s.get("src") for s in parser.scripts] == allowed_scripts and not parser.handlers
    assert "<script>alert" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "&#34;quoted&#34; &amp; amp [/] [bold] ../../escape" in text


@pytest.fixture(scope="module")
def hostile_site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    db = tmp / "m.db"
    with MatrixStore.open(db) as store:
        store.record_run(_hostile())
    before = {p for p in tmp.rglob("*")}
    result = CliRunner().invoke(
        main, ["report", "-o", str(tmp / "site"), "--db", str(db), "--no-recipes", "--no-results"]
    )
    assert result.exit_code == 0, result.output
    written = {p for p in tmp.rglob("*")} - before
    assert all(p.is_relative_to(tmp / "site") or p.name.startswith("m.db") for p in written)
    return tmp, db


def test_hostile_text_is_inert_in_index_cell_page_and_summary(hostile_site):
    tmp, _ = hostile_site
    site = tmp / "site"
    _check_html((site / "index.html").read_text(), ["index-cells.js", "filter.js"])
    cell = (site / "cells" / f"{KEY}.html").read_text()
    _check_html(cell, [])
    assert cell.count("&lt;script&gt;alert(1)") >= 8  # error, class, tag, digest, versions, device, probe x3
    summary = (site / "summary.md").read_text()
    assert "<script" not in summary and "&lt;script&gt;alert\\(1\\)&lt;/script&gt;" in summary
    table = [line for line in summary.splitlines() if line.startswith("| [")]
    # the value's "\nnext line" stays inside its row: no line of the file holds it but the row itself
    assert [line for line in summary.splitlines() if "next line" in line] == table and len(table) == 1
    assert len(re.findall(r"(?<!\\)\|", table[0])) == 14  # 13 columns: no value adds an unescaped pipe
    assert "\\[/\\] \\[bold\\] ../../escape" in summary and "\x1b" not in summary


def test_hostile_text_is_inert_in_the_compare_page_and_its_cell_script(hostile_site):
    site = hostile_site[0] / "site"
    parser = _Scripts()
    parser.feed((site / "compare.html").read_text())
    assert [s.get("src") for s in parser.scripts] == [None, None, "compare.js"] and not parser.handlers
    (profile,) = compare_scripts(site)[KEY]  # no <, > or & in compare/<slug>.js: the JSON escapes them
    assert profile["versions"]["transformers"].startswith("<script>alert(1)</script> | pipe")  # data, intact


def test_the_published_site_holds_no_hostname_or_kernel_cmdline(hostile_site, tmp_path):
    tmp, db = hostile_site
    published = "".join(p.read_text(errors="replace") for p in (tmp / "site").rglob("*") if p.is_file())
    assert SECRET_HOST not in published and SECRET_CMDLINE not in published and "kernel_cmdline" not in published
    cell = (tmp / "site" / "cells" / f"{KEY}.html").read_text()
    assert "6.8.0-45-generic" in cell and "6.8.5" in cell and "gpu_count" in cell
    full = CliRunner().invoke(
        main,
        [
            "report",
            "-o",
            str(tmp_path / "full"),
            "--db",
            str(db),
            "--no-recipes",
            "--no-results",
            "--include-host-details",
        ],
    )
    assert full.exit_code == 0
    assert SECRET_HOST in (tmp_path / "full" / "cells" / f"{KEY}.html").read_text()


@pytest.mark.parametrize("args", [("matrix", "list"), ("matrix", "show", KEY)])
def test_hostile_text_prints_literally_in_the_terminal(hostile_site, args):
    _, db = hostile_site
    result = CliRunner().invoke(main, [*args, "--db", str(db)], catch_exceptions=False, env={"COLUMNS": "600"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "[/] [bold] ../../escape" in text and "<script>alert(1)</script>" in text
    assert "\x1b" not in result.stdout


def test_a_failed_report_leaves_the_previous_site_whole(hostile_site, tmp_path, monkeypatch):
    _, db = hostile_site
    out = tmp_path / "site"
    with MatrixStore.open(db, readonly=True) as store:
        summaries = summarize(store)
        build_report(store, summaries, out, generated_at="2026-12-02T14:00:00Z")
        before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

        def broken(*_):
            raise RuntimeError("disk full")

        monkeypatch.setattr("builder.report.plots.throughput_history", broken)
        with pytest.raises(RuntimeError, match="disk full"):
            build_report(store, summaries, out, generated_at="2026-12-03T14:00:00Z")
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["site"]  # no half-built folder left beside it


def test_a_folder_that_is_not_a_report_is_never_replaced(hostile_site, tmp_path):
    _, db = hostile_site
    (tmp_path / "notes.txt").write_text("mine")
    with (
        MatrixStore.open(db, readonly=True) as store,
        pytest.raises(ReportError, match="not empty and holds no envbuild report"),
    ):
        build_report(store, [], tmp_path)
    result = CliRunner().invoke(main, ["report", "-o", str(tmp_path), "--db", str(db)])
    assert result.exit_code == 2 and (tmp_path / "notes.txt").read_text() == "mine"
