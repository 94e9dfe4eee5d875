"""Fixtures of the plan tests."""

from __future__ import annotations

import shutil

import pytest

from builder.paths import RECIPES_DIR
from builder.plan.recipes import load


@pytest.fixture
def recipes_copy(tmp_path):
    """A copy of the packaged recipes/ under tmp_path, to edit; the recipe cache is cleared around it."""
    root = tmp_path / "recipes"
    shutil.copytree(RECIPES_DIR, root)
    load.cache_clear()
    yield root
    load.cache_clear()
