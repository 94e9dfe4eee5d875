"""Locks for the Pythons of images people run (a torch line's `measured_pythons`): the stack that completes such an
image offline, never a recipe cell of their own."""

from __future__ import annotations

import shutil

import pytest

from builder.engine.foreign import ForeignError, Probe, lacking
from builder.paths import RECIPES_DIR
from builder.plan.lock import keys, read
from builder.plan.recipes import RecipeError, load
from builder.plan.resolve import all_plans


def _probe(python: str, torch: str, hip: str | None = None) -> Probe:
    return Probe(
        python=python,
        machine="x86_64",
        libc=["glibc", "2.35"],
        executable="/opt/conda/bin/python",
        distributions={"numpy": "1.26.4"},
        torch={"version": torch, "hip": hip, "file": "/opt/conda/lib/python3.12/site-packages/torch/__init__.py"},
    )


def test_each_measured_python_has_a_lock_and_no_recipe_cell():
    recipes = load()
    measured = {(line, py) for line, t in recipes.torch.items() for py in t.measured_pythons}
    assert ("2.3", "3.12") in measured  # LUMI's PyTorch SIF
    cells = {(p.torch.line, p.cell.python) for p in all_plans(recipes)}
    assert measured <= set(keys(recipes))
    assert not measured & cells  # a lock for measuring is no claim that the cell renders
    for line, python in measured:
        lock = read(recipes, line, python)
        assert {k: lock.versions("stack")[k] for k in recipes.stacks[line]} == recipes.stacks[line]


def test_lumi_s_torch_2_3_python_3_12_sif_is_completed_from_its_own_lock():
    key, missing = lacking(_probe("3.12.4", "2.3.1+rocm6.0", hip="6.0.32830"))
    assert key == "torch2.3-py3.12"
    names = {e.name for e in missing}
    assert {"transformers", "peft", "accelerate", "sentencepiece"} <= names
    assert "numpy" not in names and "torch" not in names  # what the image has stays the image's


def test_a_python_no_lock_covers_is_refused_naming_the_locks_there_are():
    with pytest.raises(ForeignError, match=r"torch 2\.3\.1 / Python 3\.13\.0 has no locked stack.*torch2\.3-py3\.12"):
        lacking(_probe("3.13.0", "2.3.1"))


def test_a_measured_python_without_its_public_record_is_refused(tmp_path):
    root = tmp_path / "recipes"
    shutil.copytree(RECIPES_DIR, root)
    path = root / "torch.toml"
    text = path.read_text()
    start = text.index('measured_pythons = { "3.12" = "DeiC')
    end = text.index("\n", start)
    path.write_text(text[:start] + 'measured_pythons = { "3.12" = " " }' + text[end:])
    with pytest.raises(RecipeError, match=r"measured_pythons 3\.12 need the public record"):
        load(root)
