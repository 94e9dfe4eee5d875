"""Each build and run attempt keeps its own directory next to the matrix file; nothing overwrites one.

Layout: `<matrix file's folder>/envbuild-attempts/<UTC time>-<build|run>-<id12>/` holding `attempt.json`
(what happened), the full log (`build.log`, or the run's `container.log` / `workload.log`), and for a
build the rendered `context/` it built, for a run its `result.json`. The store keeps the path relative
to the matrix file's folder, so the two move together.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from datetime import datetime, timezone
from pathlib import Path

from builder.store.attempt_files import ATTEMPTS_DIR, RECORD_NAME
from builder.store.store import DB_ENV_VAR, StoreError


_IDENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def new_attempt(db: Path, kind: str, ident: str) -> Path:
    """A new, empty attempt directory beside the matrix file `db` (never an existing one)."""
    if not _IDENT.fullmatch(kind) or not _IDENT.fullmatch(ident[:12]):
        raise StoreError(f"attempt {kind!r} {ident[:40]!r}: not a plain name (letters, digits, _.-), no record made")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = Path(db).resolve().parent / ATTEMPTS_DIR / f"{stamp}-{kind}-{ident[:12]}"
    try:
        path.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise StoreError(
            f"cannot create the attempt record {path} ({exc.strerror}); the matrix file's folder"
            f" must be writable: point --db / ${DB_ENV_VAR} elsewhere, or pass --no-record"
        ) from exc
    return path


def relative_to_db(db: Path, attempt: Path) -> str:
    """How the store keeps `attempt`: relative to the matrix file's folder."""
    return os.path.relpath(attempt, Path(db).resolve().parent)


def keep_context(context_dir: Path, attempt: Path) -> None:
    """A copy of the rendered context as it was built (wheels hard-linked where the filesystem allows)."""
    shutil.copytree(context_dir, attempt / "context", copy_function=_link_or_copy, symlinks=True)


def keep_file(source: Path, attempt: Path, name: str | None = None) -> None:
    """Copy `source` into the attempt (skipped when it does not exist, or is a symlink, FIFO or device: a task
    directory is written by the container); refuses to overwrite."""
    source = Path(source)
    try:
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return
    with os.fdopen(fd, "rb") as src:
        if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
            return
        with open(attempt / (name or source.name), "xb") as dst:
            shutil.copyfileobj(src, dst)


def write_record(attempt: Path, record: dict, name: str = RECORD_NAME) -> None:
    """`attempt.json` (kind, outcome, class, message, image, paths), or the document `name`; written once."""
    with open(attempt / name, "x", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
        handle.write("\n")


def _link_or_copy(src: str, dst: str) -> None:
    if src.endswith((".whl", ".tar.gz", ".zip")):
        try:
            os.link(src, dst)
            return
        except OSError:
            pass
    shutil.copy2(src, dst)
