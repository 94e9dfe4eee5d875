"""Where a lock lives and what it is called (recipes/locks/torch<line>-py<python>.txt), and the error every
lock problem raises. The resolved plan names its lock with these and the lock module reads and writes it
with them, so both import this module, not each other."""

from __future__ import annotations

from pathlib import Path

from builder.plan.recipes import DOTTED_NUMBER, Recipes

LOCKS_DIR = "locks"


class LockError(Exception):
    """A lock that is missing, stale or malformed, or a resolution that failed; the message says what to do.

    `kind`: "missing", "stale", "invalid" or "resolve"."""

    def __init__(self, message: str, kind: str = "invalid"):
        super().__init__(message)
        self.kind = kind


def lock_key(line: str, python: str) -> str:
    """`torch2.4-py3.10`; both parts must be dotted numbers (they become a file name)."""
    if not (DOTTED_NUMBER.fullmatch(line) and DOTTED_NUMBER.fullmatch(python)):
        raise LockError(f"a torch line and a Python must be dotted numbers to name a lock, got {line!r} / {python!r}")
    return f"torch{line}-py{python}"


def lock_path(recipes: Recipes, line: str, python: str) -> Path:
    return recipes.root / LOCKS_DIR / f"{lock_key(line, python)}.txt"
