"""JSON from other machines, read one way at every door: UTF-8 without a byte-order mark, no duplicate keys.

`loads(raw)` is what `matrix verify`, `matrix import`, `slurm collect` and the SIF record reader use, so a
file one door accepts is the file every door accepts, and a document cannot say two things at once
(`"status": "fail", "status": "pass"`). Before parsing, builder.bounded_read caps the nesting and the number of values;
`read_regular(path, limit)` reads a regular file (no symlink, FIFO or device) of at most `limit` bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builder import bounded_read

_BOM = b"\xef\xbb\xbf"
#: What a result.json may weigh at the doors that read one (import, verify, slurm collect).
MAX_RESULT_BYTES = 64 << 20
#: Arrays, objects and entries a document may hold (a result with three 100,000-point curves has about 900,000):
#: what the parser builds stays within a few hundred MB however the bytes are spent.
MAX_JSON_VALUES = 1_000_000


class StrictJSONError(ValueError):
    """Not JSON as the doors accept it (the message says why)."""


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise StrictJSONError(f"duplicate key {key[:80]!r} in one JSON object")
        out[key] = value
    return out


def loads(raw: bytes | str) -> Any:
    """The JSON value of `raw`: UTF-8 bytes (or text) without a BOM, each object's keys unique."""
    if isinstance(raw, str):
        if raw.startswith("\ufeff"):
            raise StrictJSONError("starts with a UTF-8 byte-order mark: save it as plain UTF-8")
        raw = raw.encode("utf-8", "surrogatepass")
    raw = bytes(raw)
    if raw[:3] == _BOM:
        raise StrictJSONError("starts with a UTF-8 byte-order mark: save it as plain UTF-8")
    try:
        bounded_read.check_json(raw, max_values=MAX_JSON_VALUES)
    except bounded_read.BoundedReadError as exc:
        raise StrictJSONError(str(exc)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StrictJSONError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(text, object_pairs_hook=_object_without_duplicates)
    except StrictJSONError:
        raise
    except RecursionError:
        raise StrictJSONError("nested too deeply") from None
    except ValueError as exc:
        raise StrictJSONError(str(exc)) from None


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of `path`, a regular file (not a symlink, FIFO, socket or device) of at most `limit` bytes,
    read by builder.bounded_read; OSError or StrictJSONError."""
    try:
        return bounded_read.read_file(path, limit)
    except bounded_read.BoundedReadError as exc:
        raise StrictJSONError(str(exc)) from None
