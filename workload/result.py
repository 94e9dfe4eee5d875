"""The result.json envelope (docs/result-schema.md, schema version 1) and its atomic write."""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

SCHEMA_VERSION = 1
RESULT_FILE = "result.json"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def envelope(
    command: str,
    *,
    error_class: str,
    error: str,
    started_at: str,
    finished_at: str | None = None,
    wall_time_s: float | None = None,
    versions: dict | None = None,
) -> dict:
    """The one constructor of result.json's envelope: every top-level key of schema version 1, in its order, in the
    error state (`finish` alone makes it "pass"). The workload starts each result from it (`new_result`); `envbuild
    run` writes it whole for a run that left no valid result of its own."""
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": uuid.uuid4().hex,
        "command": command,
        "status": "error",
        "error_class": error_class,
        "error": error,
        "started_at": started_at,
        "finished_at": finished_at,
        "wall_time_s": wall_time_s,
        "versions": versions,
        "hardware": None,
        "model": None,
        "dataset": None,
        "config": None,
        "metrics": None,
        "probes": [],
        "artifacts": {},
    }


def new_result(command: str) -> dict:
    """An envelope in the error state: nothing is "pass" until `finish` says so."""
    result = envelope(command, error_class="interrupted", error="the run did not finish", started_at=_now())
    result["_t0"] = time.perf_counter()
    return result


def finish(result: dict, status: str, error_class: str | None = None, error: str | None = None) -> dict:
    if status not in ("pass", "fail", "error"):
        raise ValueError(f"bad status {status!r}")
    if status != "pass" and not error_class:
        raise ValueError("a result that is not pass needs an error_class")
    result.update(
        status=status,
        error_class=error_class if status != "pass" else None,
        error=error if status != "pass" else None,
        finished_at=_now(),
    )
    result["wall_time_s"] = round(time.perf_counter() - result.pop("_t0", time.perf_counter()), 3)
    return result


def _finite_or_null(value):
    """JSON has no NaN/inf: a diverged curve point is written as null."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(v) for v in value]
    return value


def write_result(out_dir: str | Path, result: dict) -> Path:
    """Write DIR/result.json atomically: a temp file in DIR, fsync, then os.replace."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = _finite_or_null({k: v for k, v in result.items() if not k.startswith("_")})
    fd, tmp = tempfile.mkstemp(prefix=".result-", suffix=".json.tmp", dir=out_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(payload, f, indent=2, ensure_ascii=False, allow_nan=False, default=str)
            f.flush()
            os.fsync(f.fileno())
        target = out_dir / RESULT_FILE
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
