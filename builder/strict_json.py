"""JSON from other machines, read one way at every door: UTF-8 without a byte-order mark, no duplicate keys.

`loads(raw)` is what `matrix verify`, `matrix import`, `slurm collect` and the SIF record reader use, so a
file one door accepts is the file every door accepts, and a document cannot say two things at once
(`"status": "fail", "status": "pass"`). `read_regular(path, limit)` reads a regular file (no symlink, FIFO
or device) of at most `limit` bytes. Imports nothing from builder.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

_BOM = b"\xef\xbb\xbf"
#: What a result.json may weigh at the doors that read one (import, verify, slurm collect).
MAX_RESULT_BYTES = 64 << 20


class StrictJSONError(ValueError):
    """Not JSON as the doors accept it (the message says why)."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise StrictJSONError(f"duplicate key {key[:80]!r} in one JSON object")
        out[key] = value
    return out


def loads(raw: bytes | str) -> Any:
    """The JSON value of `raw`: UTF-8 bytes (or text) without a BOM, each object's keys unique."""
    if isinstance(raw, (bytes, bytearray)):
        if bytes(raw[:3]) == _BOM:
            raise StrictJSONError("starts with a UTF-8 byte-order mark: save it as plain UTF-8")
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StrictJSONError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    else:
        text = raw
        if text.startswith("\ufeff"):
            raise StrictJSONError("starts with a UTF-8 byte-order mark: save it as plain UTF-8")
    try:
        return json.loads(text, object_pairs_hook=_pairs)
    except StrictJSONError:
        raise
    except RecursionError:
        raise StrictJSONError("nested too deeply") from None
    except ValueError as exc:
        raise StrictJSONError(str(exc)) from None


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of `path`, a regular file (not a symlink, FIFO, socket or device) of at most `limit` bytes.
    Opened without following a final symlink and without blocking on a FIFO; OSError or StrictJSONError."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if os.path.islink(path):
            raise StrictJSONError("a symbolic link: import the file it points to") from None
        raise exc
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise StrictJSONError("not a regular file (a FIFO, socket or device)")
        if info.st_size > limit:
            raise StrictJSONError(f"larger than {limit} bytes")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise StrictJSONError(f"larger than {limit} bytes")
    return data
