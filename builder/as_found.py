"""A command that exits 2 leaves the working folder as it found it.

A command decorated with `@leaves_as_found` calls `will_create(path)` before it makes a file or folder that
did not exist. When the command then ends with exit 2 (bad input, a missing prerequisite: "nothing written"),
each such path is removed again, and so is each folder above it that the command created, once empty.
Whatever existed before is never touched. A neutral module: the workflows note what they create, the CLI's verbs
carry the decorator.
"""

from __future__ import annotations

import functools
import os
import shutil
from contextvars import ContextVar
from pathlib import Path

_CREATED: ContextVar[list[tuple[Path, Path]] | None] = ContextVar("envbuild_created", default=None)


def will_create(path: Path) -> None:
    """Note that the running command may create `path` (nothing is noted when it exists already)."""
    created = _CREATED.get()
    path = Path(path).absolute()
    if created is None or path.exists() or path.is_symlink():
        return
    top = path
    while not top.parent.exists():
        top = top.parent
    created.append((path, top))


def _exit_code(exc: BaseException) -> int | None:
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else None
    return getattr(exc, "exit_code", None)  # click's UsageError (2) and ClickException subclasses


def _remove(path: Path, top: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()
    folder = path.parent
    while top in (folder, *folder.parents):  # folders made on the way, only when empty (another run may use them)
        try:
            os.rmdir(folder)
        except OSError:
            break
        folder = folder.parent


def leaves_as_found(command):
    """Run `command` so that what it noted with `will_create` is removed when it ends with exit code 2."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        created: list[tuple[Path, Path]] = []
        token = _CREATED.set(created)
        try:
            return command(*args, **kwargs)
        except BaseException as exc:
            if _exit_code(exc) == 2:
                for path, top in reversed(created):
                    _remove(path, top)
            raise
        finally:
            _CREATED.reset(token)

    return run
