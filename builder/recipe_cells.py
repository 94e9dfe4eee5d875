"""The cells the recipes define: the report's 'untested' slots and the CI matrix's jobs.

The recipe data and its resolver belong to `builder/recipes.py` / `builder/resolve.py`; this module
only asks them, so no version knowledge is repeated here.
"""

from __future__ import annotations

from builder.cells import Cell


class RecipeCellsError(Exception):
    """The recipes could not be read; the message says why."""


def recipe_cells() -> list[Cell]:
    """Every valid cell of the recipes, ordered by key."""
    return []
