"""Output paths checked before any work: a command that cannot write its `-o` says so at once (exit code 2)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _probe_write(directory: Path) -> None:
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".envbuild-write-test-"):
        pass


def writable_output(path: Path, param_hint: str, *, is_file: bool = False) -> Path:
    """`path` (a directory, or a file with `is_file`) can be created or replaced here; nothing is created.
    Raises click.BadParameter naming the option otherwise."""
    existing = _nearest_existing(Path(path))
    try:
        if existing == Path(path).absolute():
            if is_file and existing.is_dir():
                raise click.BadParameter(f"{path} is a directory; give a file path", param_hint=param_hint)
            if not is_file and not existing.is_dir():
                raise click.BadParameter(f"{path} is a file; give a directory", param_hint=param_hint)
            if is_file and not os.access(existing, os.W_OK):
                raise PermissionError(13, "Permission denied")
        elif not existing.is_dir():
            raise click.BadParameter(f"{existing} is a file, so {path} cannot be created", param_hint=param_hint)
        _probe_write(existing if existing.is_dir() else existing.parent)
    except OSError as exc:
        raise click.BadParameter(
            f"cannot write {path} ({exc.strerror or exc}); pick a directory you can write", param_hint=param_hint
        ) from None
    return path
