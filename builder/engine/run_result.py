"""Collect a workload's result.json after a run and complete it with the `host` and `image` blocks.

A result is complete only when the workload wrote a valid `status: "pass"` result AND its process
(or container) exited cleanly. A run that died, was interrupted or left no valid result is written as
`status: "error"` with an `error_class`, never as "pass" (docs/result-schema.md).
"""

from __future__ import annotations

import json
import tempfile
import uuid
from datetime import datetime, timezone
from pathlib import Path

from builder.store.attempts import keep_file, new_attempt, relative_to_db, write_record
from builder import strict_json
from builder.store.store import validate_result
from builder.paths import file_sha256, write_text_atomic

RESULT_NAME = "result.json"
VERSION_KEYS = ("python", "torch", "hip", "cuda", "transformers", "peft", "accelerate",
                "sentencepiece", "safetensors", "numpy", "workload")


def utc_iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_json_atomic(path: Path, data: dict) -> None:
    """Write JSON to a temp file in the same directory, then rename it over `path`."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def check_out_dir(out_dir: Path) -> Path:
    """Create the output dir and prove it is writable; refuse one that already holds a result."""
    out_dir = Path(out_dir).expanduser().resolve()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".envbuild-write-test-"):
            pass
    except OSError as exc:
        raise PermissionError(f"output dir {out_dir} is not writable ({exc.strerror}); "
                              "pass --out with a directory you can write") from exc
    if (out_dir / RESULT_NAME).exists():
        raise FileExistsError(f"{out_dir / RESULT_NAME} exists from an earlier run; "
                              "pass a fresh --out directory (results are never overwritten)")
    return out_dir


def _load(path: Path) -> tuple[dict | None, str | None]:
    """The result at `path` if present and valid, else (None, why not)."""
    if not path.is_file() and not path.is_symlink():
        return None, None
    try:
        result = strict_json.loads(strict_json.read_regular(path, strict_json.MAX_RESULT_BYTES))
        validate_result(result)
    except (OSError, ValueError) as exc:  # strict_json's and the schema's errors are ValueErrors
        return None, f"{path.name} is not a valid result ({str(exc).splitlines()[0]})"
    return result, None


def error_result(error_class: str, message: str, *, started: float, finished: float,
                 versions: dict) -> dict:
    """The envelope written when the workload left no usable result."""
    return {
        "schema_version": 1,
        "run_id": uuid.uuid4().hex,
        "command": "train",
        "status": "error",
        "error_class": error_class,
        "error": message,
        "started_at": utc_iso(started),
        "finished_at": utc_iso(finished),
        "wall_time_s": round(finished - started, 3),
        "versions": {key: versions.get(key) for key in VERSION_KEYS},
        "hardware": None, "model": None, "dataset": None, "config": None, "metrics": None,
        "probes": [], "artifacts": {},
    }


def envbuild_invocation(request, image: str | None) -> dict:
    """What `envbuild run workload` was asked, as the result's `invocation` records it: the command that
    reproduces the run (`envbuild`: `--local` or `--image TAG`, preset, model, data, workload arguments; no
    --out or --db, which are the user's paths) and, for a run that left no result of its own, the preset,
    model and data file (name and sha256) the workload would have recorded."""
    command = ["envbuild", "run", "workload", *(["--image", image] if image else ["--local"]),
               "--preset", request.preset]
    command += ["--model", str(request.model)] if request.model else []
    command += ["--data", Path(request.data).name] if request.data else []
    command += ["--gpus", request.gpus] if request.gpus else []
    command += ["--", *request.extra_args] if request.extra_args else []
    data = None
    if request.data and Path(request.data).is_file():
        data = {"name": Path(request.data).name, "bundled": False, "sha256": file_sha256(Path(request.data))}
    elif not request.data:
        data = {"name": "emotions.jsonl", "bundled": True, "sha256": None}
    return {"envbuild": command, "preset": request.preset, "model": request.model or None, "data": data,
            # unknown without the workload: its own arguments may change the recipe
            "overrides": None if request.extra_args else {}, "probes": "--no-probes" not in request.extra_args}


def finalize(out_dir: Path, *, failure_class: str | None, failure: str,
             started: float, finished: float, versions: dict, host: dict, image: dict | None,
             invocation: dict | None = None) -> dict:
    """Turn what the run left in `out_dir` into its final result.json and return it.

    `failure_class` names what went wrong outside the workload ("interrupted", "container_died", ...),
    None when the process exited 0; `versions` is what is known without the workload (for the envelope);
    `invocation` (envbuild_invocation): its `envbuild` command goes into the workload's own `invocation`,
    the whole block into a result the workload did not write.
    """
    path = Path(out_dir) / RESULT_NAME
    result, invalid = _load(path)
    if invalid:
        path.replace(path.with_name("result.invalid.json"))  # keep the bytes for inspection
    if result is None:
        error_class = failure_class or ("invalid_result" if invalid else "no_result")
        detail = invalid or "the workload wrote no result.json"
        message = f"{failure}; {detail}" if failure_class else detail
        result = error_result(error_class, message, started=started, finished=finished, versions=versions)
    elif failure_class and result["status"] == "pass":
        result.update(status="error", error_class=failure_class,
                      error=f"{failure} after the workload reported pass")
    if invocation is not None:
        own = result.get("invocation") if isinstance(result.get("invocation"), dict) else None
        result["invocation"] = {**own, "envbuild": invocation["envbuild"]} if own else invocation
    result["host"] = host
    if image is not None:
        result["image"] = image
    write_json_atomic(path, result)
    return result


def keep_run(db: Path, out_dir: Path, result: dict) -> str:
    """The run's own attempt directory beside the matrix file `db`: its result.json, log and attempt.json;
    returns the path the store keeps (docs/matrix.md "Attempts")."""
    attempt = new_attempt(db, "run", result["run_id"])
    for name in (RESULT_NAME, "container.log", "workload.log", "third-party.log"):
        keep_file(Path(out_dir) / name, attempt)
    write_record(attempt, {"kind": "run", "id": result["run_id"], "status": result["status"],
                           "error_class": result.get("error_class"), "error": result.get("error"),
                           "out_dir": str(Path(out_dir).resolve()), "image": (result.get("image") or {}).get("tag")})
    return relative_to_db(db, attempt)
