"""Output paths checked before any work: a command that cannot write its `-o` says so at once (exit code 2)."""

from __future__ import annotations

from pathlib import Path

import click

from builder.paths import output_problem


def writable_output(path: Path, param_hint: str, *, is_file: bool = False) -> Path:
    """`path` (a directory, or a file with `is_file`) can be created or replaced here; nothing is created.
    Raises click.BadParameter naming the option otherwise."""
    problem = output_problem(path, is_file=is_file)
    if problem is not None:
        raise click.BadParameter(problem, param_hint=param_hint)
    return path
