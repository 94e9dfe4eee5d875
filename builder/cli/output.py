"""The console a command prints its tables to (stdout): one rule for every command that prints tables.

On a terminal: the terminal's width (tables fit it, long columns end in "…"). Piped or redirected, with no
COLUMNS set: lines as long as their content, never cut or wrapped at rich's default of 80 columns, so
`envbuild recipes list | grep`, `matrix show CELL > file` and `matrix diff A B | less` keep every value.
"""

from __future__ import annotations

import os

from rich.console import Console

#: The width a piped console lays its tables out in: wider than any line a table here makes.
PIPED_WIDTH = 4096


def stdout_console(**options) -> Console:
    console = Console(**options)
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(width=PIPED_WIDTH, **options)


def fits_terminal(console: Console) -> bool:
    """Whether tables should be cut to the console's width (a terminal, or COLUMNS set), not printed whole."""
    return console.is_terminal or bool(os.environ.get("COLUMNS"))
