"""Complete a run's result.json from how it ended (the engine's RunEnd; `finalize`) and file it as an
attempt beside the matrix (`keep_run`)."""

from __future__ import annotations

from pathlib import Path

from builder import strict_json
from builder.known_secrets import MAX_KEPT_LOG, copy_scrubbed, known_secrets
from builder.paths import CONTAINER_LOG, WORKLOAD_LOG
from workload.result import RESULT_FILE, envelope
from workload.training.noise import LOG_NAME as THIRD_PARTY_LOG
from builder.engine.run_result import VERSION_KEYS, RunEnd, utc_iso, write_json_atomic
from builder.store.attempts import keep_file, new_attempt, relative_to_db, write_record
from builder.store.store import validate_result


def _read_result(path: Path) -> tuple[dict | None, str | None]:
    """The result at `path` if present and valid, else (None, why not)."""
    if not path.is_file() and not path.is_symlink():
        return None, None
    try:
        result = strict_json.loads(strict_json.read_regular(path, strict_json.MAX_RESULT_BYTES))
        validate_result(result)
    except (OSError, ValueError) as exc:  # strict_json's and the schema's errors are ValueErrors
        return None, f"{path.name} is not a valid result ({str(exc).splitlines()[0]})"
    return result, None


def error_result(error_class: str, message: str, *, started: float, finished: float, versions: dict) -> dict:
    """The envelope written when the workload left no usable result."""
    return envelope(
        "train",
        error_class=error_class,
        error=message,
        started_at=utc_iso(started),
        finished_at=utc_iso(finished),
        wall_time_s=round(finished - started, 3),
        versions={key: versions.get(key) for key in VERSION_KEYS},
    )


def finalize(end: RunEnd, check=None) -> dict:
    """Turn what the run left in `end.out_dir` into its final result.json and return it.

    A result is complete only when the workload wrote a valid `status: "pass"` result AND its process (or
    container) exited cleanly. A run that died, was interrupted or left no valid result is written as
    `status: "error"` with an `error_class`, never as "pass" (docs/result-schema.md). The invocation's
    `envbuild` command goes into the workload's own `invocation`, the whole block into a result the workload
    did not write; `host`, `image` and `environment` are the host's (a route without an image drops an `image` block
    the result claims). An image envbuild did not build wrote its result into its own folder (`end.written_by_image`),
    read from there through the bounded reader. `check(result)` runs on the completed result before it is written
    (its error stops the run: nothing is written).
    """
    failure_class, failure, invocation = end.failure_class, end.failure, end.invocation
    path = Path(end.out_dir) / RESULT_FILE
    source = Path(end.written_by_image) / RESULT_FILE if end.written_by_image else path
    result, invalid = _read_result(source)
    if invalid:
        source.replace(source.with_name("result.invalid.json"))  # keep the bytes for inspection
    if result is None:
        error_class = failure_class or ("invalid_result" if invalid else "no_result")
        detail = invalid or "the workload wrote no result.json"
        message = f"{failure}; {detail}" if failure_class else detail
        result = error_result(error_class, message, started=end.started, finished=end.finished, versions=end.versions)
    elif failure_class and result["status"] == "pass":
        result.update(status="error", error_class=failure_class, error=f"{failure} after the workload reported pass")
    if invocation is not None:
        own = result.get("invocation") if isinstance(result.get("invocation"), dict) else None
        result["invocation"] = {**own, "envbuild": invocation["envbuild"]} if own else invocation
    result["host"] = end.host
    for key, value in (("image", end.image), ("environment", end.environment)):
        if value is None:  # what ran is the host's to say: a block the workload wrote itself is dropped
            result.pop(key, None)
        else:
            result[key] = value
    if check is not None:
        check(result)
    write_json_atomic(path, result)
    return result


def keep_run(db: Path, out_dir: Path, result: dict, written_by_image: Path | None = None) -> str:
    """The run's own attempt directory beside the matrix file `db`: its result.json, logs and attempt.json;
    returns the path the store keeps (docs/matrix.md "Attempts"). Logs are kept scrubbed of the host's known
    secret values; the third-party log of an image envbuild did not build comes from its own folder, at most
    MAX_KEPT_LOG bytes, never through a link."""
    attempt = new_attempt(db, "run", result["run_id"])
    keep_file(Path(out_dir) / RESULT_FILE, attempt)
    secrets = known_secrets()
    for name in (CONTAINER_LOG, WORKLOAD_LOG, THIRD_PARTY_LOG):
        folder = Path(written_by_image) if written_by_image and name == THIRD_PARTY_LOG else Path(out_dir)
        copy_scrubbed(folder / name, attempt / name, MAX_KEPT_LOG, secrets)
    write_record(
        attempt,
        {
            "kind": "run",
            "id": result["run_id"],
            "status": result["status"],
            "error_class": result.get("error_class"),
            "error": result.get("error"),
            "out_dir": str(Path(out_dir).resolve()),
            "image": (result.get("image") or {}).get("tag"),
        },
    )
    return relative_to_db(db, attempt)
