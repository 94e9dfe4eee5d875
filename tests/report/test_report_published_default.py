"""`envbuild report` includes the project's published results (results/, each attestation verified) without an
import step: alone in a new folder with no matrix, beside the local matrix otherwise, which stays untouched."""

from __future__ import annotations

import hashlib
import re
import json
import shutil

from click.testing import CliRunner

from builder.cli import main
from builder.paths import RESULTS_DIR
from matrix_fixtures import make_result
from site_files import index_pages

PUBLISHED = {"cpu-torch2.13-py3.11", "cuda13.0-torch2.11-sm_90-py3.12"}  # what results/ holds today


def _cells(site) -> dict:
    return {c["key"]: c for c in json.loads((site / "data.json").read_text())["cells"]}


def test_a_new_folder_without_a_matrix_shows_the_published_results(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ENVBUILD_DB", raising=False)
    ran = CliRunner().invoke(main, ["report", "-o", "site"])
    assert ran.exit_code == 0, ran.output
    cells = _cells(tmp_path / "site")
    assert {k for k, c in cells.items() if c["status"] == "pass"} == PUBLISHED
    index = index_pages(tmp_path / "site")
    # measured environments beside the recipe cells: the CI's envbuild image, a contributor's venv
    assert "in an envbuild image" in index and "in a Python environment (--local)" in index
    for key in PUBLISHED:  # verified attestations (CI's or a contributor's), not just files
        assert re.search(rf'data-cell="{re.escape(key)}"[^>]*data-provenance="(ci|contributed)"', index), key
    assert not (tmp_path / "envbuild-matrix.db").exists()  # nothing created here
    bare = CliRunner().invoke(main, ["report", "-o", "site2", "--no-results"])
    assert bare.exit_code == 2 and "site2" not in {p.name for p in tmp_path.iterdir()}


def test_the_local_matrix_and_the_published_results_side_by_side(tmp_path):
    db = tmp_path / "m.db"
    result = tmp_path / "result.json"
    result.write_text(json.dumps(make_result()))
    assert CliRunner().invoke(main, ["matrix", "import", str(result), "--db", str(db)]).exit_code == 0
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    ran = CliRunner().invoke(main, ["report", "-o", str(tmp_path / "site"), "--db", str(db)])
    assert ran.exit_code == 0, ran.output
    cells = _cells(tmp_path / "site")
    assert cells["rocm6.2-torch2.4-gfx90a-py3.10"]["status"] == "pass" and PUBLISHED <= {
        k for k, c in cells.items() if c["status"] == "pass"
    }
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before  # merged in a scratch copy only


def test_a_published_result_whose_attestation_fails_is_left_out_with_a_warning(tmp_path, monkeypatch):
    results = tmp_path / "results"
    shutil.copytree(RESULTS_DIR, results)
    [signed] = [
        p
        for p in results.rglob("result.json")
        if p.with_name("result.json.intoto.jsonl").exists() and "cpu-torch2.13" in str(p)
    ][:1]
    data = json.loads(signed.read_text())
    data["wall_time_s"] = 1.0  # the attestation no longer matches the file
    signed.write_text(json.dumps(data))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ENVBUILD_DB", raising=False)
    ran = CliRunner().invoke(main, ["report", "-o", "site", "--results", str(results)])
    assert ran.exit_code == 0, ran.output
    assert "left out of the report" in ran.output and "cpu-torch2.13-py3.11" in ran.output
    assert _cells(tmp_path / "site").get("cpu-torch2.13-py3.11", {}).get("status") != "pass"
