"""What a run leaves behind, before its result is checked: the output directory (`check_out_dir`), the
command that reproduces it (`envbuild_invocation`) and the run's end (`RunEnd`: how it ended, when, on which
host, in which image). builder.workflows.run_result turns a RunEnd into the final result.json; the engine
never validates or records a result itself.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from builder.paths import file_sha256, write_text_atomic
from workload.result import RESULT_FILE  # the workload writes it

VERSION_KEYS = (
    "python",
    "torch",
    "hip",
    "cuda",
    "transformers",
    "peft",
    "accelerate",
    "sentencepiece",
    "safetensors",
    "numpy",
    "workload",
)


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
        raise PermissionError(
            f"output dir {out_dir} is not writable ({exc.strerror}); pass --out with a directory you can write"
        ) from exc
    if (out_dir / RESULT_FILE).exists():
        raise FileExistsError(
            f"{out_dir / RESULT_FILE} exists from an earlier run; "
            "pass a fresh --out directory (results are never overwritten)"
        )
    return out_dir


def envbuild_invocation(request, image: str | None) -> dict:
    """What `envbuild run workload` was asked, as the result's `invocation` records it: the command that
    reproduces the run (`envbuild`: `--local` or `--image TAG`, preset, model, data, workload arguments; no
    --out or --db, which are the user's paths) and, for a run that left no result of its own, the preset,
    model and data file (name and sha256) the workload would have recorded."""
    command = [
        "envbuild",
        "run",
        "workload",
        *(["--image", image] if image else ["--local"]),
        "--preset",
        request.preset,
    ]
    command += ["--model", str(request.model)] if request.model else []
    command += ["--data", Path(request.data).name] if request.data else []
    command += ["--gpus", request.gpus] if request.gpus else []
    command += ["--", *request.extra_args] if request.extra_args else []
    data = None
    if request.data and Path(request.data).is_file():
        data = {"name": Path(request.data).name, "bundled": False, "sha256": file_sha256(Path(request.data))}
    elif not request.data:
        data = {"name": "emotions.jsonl", "bundled": True, "sha256": None}
    return {
        "envbuild": command,
        "preset": request.preset,
        "model": request.model or None,
        "data": data,
        # unknown without the workload: its own arguments may change the recipe
        "overrides": None if request.extra_args else {},
        "probes": "--no-probes" not in request.extra_args,
    }


@dataclass
class RunEnd:
    """How a run ended, as the engine saw it: `failure_class` names what went wrong outside the workload
        ("interrupted", "container_died", ...), None when the process exited 0; `versions` is what is known without
        the workload (for an error envelope); `invocation` (envbuild_invocation) goes into the result; `written_by_image` is
    the folder an image envbuild did not build wrote into (its result.json is read from there, never `out_dir`)."""

    out_dir: Path
    failure_class: str | None
    failure: str
    started: float
    finished: float
    versions: dict
    host: dict
    image: dict | None
    invocation: dict | None = None
    environment: dict | None = None  # the Python environment a run on this host used (the result's `environment`)
    written_by_image: Path | None = None
    contradicts: Callable[[dict], str | None] | None = None  # how a final result contradicts what the host read


def run_end(
    out_dir: Path,
    failure_class: str | None,
    failure: str,
    started: float,
    *,
    versions: dict,
    host: dict,
    image: dict | None = None,
    invocation: dict | None = None,
    environment: dict | None = None,
    written_by_image: Path | None = None,
    contradicts: Callable[[dict], str | None] | None = None,
    finished: float | None = None,
) -> RunEnd:
    """The one place a RunEnd is made: every route's end, and a Slurm task's. `finished` is now unless the caller
    knows better (sacct's end of a task); `contradicts` (a venv's run) says how the final result contradicts what
    the host read of the environment, None when it does not."""
    return RunEnd(
        out_dir,
        failure_class=failure_class,
        failure=failure,
        started=started,
        finished=time.time() if finished is None else finished,
        versions=versions,
        host=host,
        image=image,
        invocation=invocation,
        environment=environment,
        written_by_image=written_by_image,
        contradicts=contradicts,
    )
