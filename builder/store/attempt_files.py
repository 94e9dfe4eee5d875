"""Which files a report may publish: only those the store itself created under its attempt root.

A path named by data (a build's `log_path`, a run's `source`, an imported row's attempt directory)
is never opened. A log is published only when it is `<attempt root>/<attempt>/<known name>`, where the
attempt root is `envbuild-attempts/` beside the matrix file: every part resolved, none a symlink, the
file a regular file inside that root. This module imports only the file names from builder.paths and
workload.result.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from builder.paths import (
    BUILD_LOG,
    BUILD_RECORD,
    CONTAINER_LOG,
    PROVENANCE_ENVELOPE,
    PROVENANCE_FILE,
    SBOM_FILE,
    WORKLOAD_LOG,
)
from workload.result import RESULT_FILE

ATTEMPTS_DIR = "envbuild-attempts"
#: Each attempt's own record (builder.store.attempts writes it).
RECORD_NAME = "attempt.json"
#: The logs an attempt directory holds (docs/matrix.md "Attempts").
LOG_NAMES = (BUILD_LOG, CONTAINER_LOG, WORKLOAD_LOG)
_ATTEMPT_NAME = re.compile(r"[0-9]{8}T[0-9]{6}Z-(build|run)-[0-9A-Za-z_.-]{1,64}")


def attempt_root(db: Path) -> Path:
    """`envbuild-attempts/` beside the matrix file (resolved: the file's own folder may be a link)."""
    return Path(db).resolve().parent / ATTEMPTS_DIR


def attempt_log(db: Path, attempt_dir: str | None, names: tuple[str, ...] = LOG_NAMES) -> tuple[Path | None, str]:
    """(the first of `names` in the stored `attempt_dir`, "") when publishing it is safe, else (None, why not).

    `attempt_dir` must be relative and name one attempt folder directly under the attempt root
    (`envbuild-attempts/<UTC time>-<kind>-<id>`); neither that folder nor the file may be a symlink.
    "why not" is "" when there is simply no log (nothing to warn about).
    """
    if not attempt_dir:
        return None, ""
    stored = Path(attempt_dir)
    root = attempt_root(db)
    if (
        stored.is_absolute()
        or len(stored.parts) != 2
        or stored.parts[0] != ATTEMPTS_DIR
        or not _ATTEMPT_NAME.fullmatch(stored.parts[1])
    ):
        return None, f"attempt directory {attempt_dir!r} is not one this matrix file's store created"
    folder = root / stored.parts[1]
    for name in names:
        path = folder / name
        try:
            if os.path.islink(root) or os.path.islink(folder):
                return None, f"{folder} is a symbolic link"
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return None, f"{path}: {exc.strerror}"
        if not stat.S_ISREG(info.st_mode):
            return None, f"{path} is not a regular file (a link or something else)"
        if Path(os.path.realpath(path)) != path:
            return None, f"{path} resolves outside the attempt root"
        return path, ""
    return None, ""


def read_tail(path: Path, limit: int) -> bytes:
    """The last `limit` bytes of a regular file, opened without following a final symlink."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        handle.seek(max(0, size - limit))
        return handle.read(limit)


#: What merging another matrix file copies of each of its attempts (never the build context).
ADOPTED_NAMES = (RECORD_NAME, BUILD_RECORD, RESULT_FILE, *LOG_NAMES, SBOM_FILE, PROVENANCE_FILE, PROVENANCE_ENVELOPE)
ADOPT_LIMIT_BYTES = 64 * 2**20  # a longer log keeps its tail


def _recorded_id(db: Path, attempt_dir: str) -> str | None:
    """The `id` an attempt folder's own attempt.json names (None when it has none that can be read safely)."""
    path, _ = attempt_log(db, attempt_dir, (RECORD_NAME,))
    if path is None:
        return None
    try:
        record = json.loads(read_tail(path, 1 << 20))
    except (OSError, ValueError):
        return None
    return record.get("id") if isinstance(record, dict) and isinstance(record.get("id"), str) else None


def adopt_attempt(source_db: Path, attempt_dir: str | None, target_db: Path, ident: str | None = None) -> str | None:
    """Copy an attempt of another matrix file (a CI job's) under `target_db`'s attempt root; its stored path.

    Only an attempt folder directly under the source file's own attempt root, and only its regular
    files of ADOPTED_NAMES, are copied (symlinks, other names and the context are not). Returns None
    when there is nothing safe to copy. A folder of that name already under the target's root is kept as it
    is and adopted only when its attempt.json names the same run or build (`ident`): a merged row never takes
    over another run's folder, and its logs.
    """
    if not attempt_dir:
        return None
    source_root = attempt_root(source_db)
    stored = Path(attempt_dir)
    if stored.is_absolute():  # an absolute path under the source's attempt root is taken as its relative one
        try:
            stored = Path(ATTEMPTS_DIR) / stored.relative_to(source_root)
        except ValueError:
            return None
    if len(stored.parts) != 2 or stored.parts[0] != ATTEMPTS_DIR or not _ATTEMPT_NAME.fullmatch(stored.parts[1]):
        return None
    target = attempt_root(target_db) / stored.parts[1]
    if os.path.lexists(target):
        return str(stored) if ident is not None and _recorded_id(target_db, str(stored)) == ident else None
    files = [path for name in ADOPTED_NAMES if (path := attempt_log(source_db, str(stored), (name,))[0]) is not None]
    if not files:
        return None
    target.mkdir(parents=True)
    for path in files:
        (target / path.name).write_bytes(read_tail(path, ADOPT_LIMIT_BYTES))
    return str(stored)
