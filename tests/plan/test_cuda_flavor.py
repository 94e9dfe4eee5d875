"""The cuda flavor is real in the CLI, and it is data: recipes/cuda.toml + recipes/flavors.d/cuda.toml."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.paths import RECIPES_DIR
from builder.plan.recipes import RecipeError, load

H200_RESULT = Path(__file__).parents[1] / "data" / "h200-cuda13.0-smoke-result.json"  # `python -m workload train
# --preset smoke` on an H200 with torch 2.11.0+cu130, 2026-12-02 (the device machine of this project)


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def test_recipes_list_knows_the_cuda_cells():
    result = invoke("recipes", "list", "--flavor", "cuda", "--json")
    assert result.exit_code == 0, result.output
    rows = {row["cell"]: row for row in json.loads(result.output)}
    cell = rows["cuda13.0-torch2.11-sm_90-py3.12"]
    assert cell["torch_version"] == "2.11.0" and cell["torch_source"] == "wheel"
    assert "cu130" in cell["reason"] and "download.pytorch.org/whl/cu130" in cell["fact_source"]
    assert {row["arch"] for row in rows.values()} == {"sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"}


def test_render_cuda_takes_the_official_cu130_wheel(tmp_path):
    result = invoke("render", "--cuda", "13.0", "--torch", "2.11", "-o", str(tmp_path / "ctx"))
    assert result.exit_code == 0, result.output
    dockerfile = (tmp_path / "ctx" / "Dockerfile").read_text()
    assert "ARG TORCH_VERSION=2.11.0+cu130" in dockerfile
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130" in dockerfile
    assert "install_rocm" not in dockerfile and "ARG BASE_IMAGE=ubuntu:24.04" in dockerfile
    manifest = json.loads((tmp_path / "ctx" / "manifest.json").read_text())
    assert manifest["cell"] == {
        "flavor": "cuda",
        "accel_version": "13.0",
        "torch": "2.11",
        "arch": "sm_90",
        "python": "3.12",
    }


@pytest.mark.parametrize(
    "args,message",
    [
        (["--cuda", "13.0", "--rocm", "6.2", "--torch", "2.11"], "--rocm and --cuda exclude each other"),
        (["--flavor", "cpu", "--cuda", "13.0", "--torch", "2.13"], "--cuda 13.0 conflicts with --flavor cpu"),
        (["--cuda", "12.4", "--torch", "2.11"], "unknown CUDA release '12.4'"),
        (["--cuda", "13.0", "--torch", "2.11", "--arch", "gfx90a"], "arch 'gfx90a' is not supported by CUDA 13.0"),
        (["--cuda", "13.0", "--torch", "2.11", "--torch-source", "source"], "no torch source build"),
        (["--flavor", "cuda", "--torch", "2.11"], "--cuda VERSION is required"),
    ],
)
def test_bad_cuda_requests_are_usage_errors(tmp_path, args, message):
    result = invoke("render", *args, "-o", str(tmp_path / "ctx"))
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "ctx").exists()


def test_a_run_measured_on_a_cuda_machine_lands_in_its_recipe_cell(tmp_path):
    db = tmp_path / "m.db"
    imported = invoke("matrix", "import", str(H200_RESULT), "--db", str(db))
    assert imported.exit_code == 0, imported.output
    listed = invoke("matrix", "list", "--json", "--db", str(db))
    (cell,) = json.loads(listed.output)
    assert cell["key"] == "cuda13.0-torch2.11-sm_90-py3.12" and cell["status"] == "pass"
    recipes = json.loads(invoke("recipes", "list", "--flavor", "cuda", "--json").output)
    assert cell["key"] in {row["cell"] for row in recipes}


@pytest.fixture
def recipes_copy(tmp_path):
    root = tmp_path / "recipes"
    shutil.copytree(RECIPES_DIR, root)
    load.cache_clear()
    yield root
    load.cache_clear()


def test_the_flavor_is_only_data(recipes_copy):
    assert "cuda" in load(recipes_copy).flavors
    shutil.rmtree(recipes_copy / "flavors.d")
    (recipes_copy / "cuda.toml").unlink()
    load.cache_clear()
    assert "cuda" not in load(recipes_copy).flavors and "2.11" not in load(recipes_copy).torch


def test_a_dropin_cannot_redefine_a_table(recipes_copy):
    dropin = recipes_copy / "flavors.d" / "cuda.toml"
    dropin.write_text(dropin.read_text().replace('[torch."2.11"]', '[torch."2.6"]'))
    with pytest.raises(RecipeError, match='flavors.d/: \\[torch."2.6"\\] is already defined in torch.toml'):
        load(recipes_copy)
