"""Build records for tests: a real context rendered in memory for a request (so its cell recomputes with the
recipes), wrapped in the record `envbuild image` writes; keys and allowed_signers files from real ssh-keygen."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

from builder.paths import BUILD_RECORD
from builder.plan.context_identity import request_of, wheelhouse_of
from builder.plan.render import StaticFiles, context_files
from builder.plan.resolve import Request, resolve

CPU = {"flavor": "cpu", "torch": "2.13", "base_image": "envbuild-local/debian:bookworm"}
ROCM_SOURCE = {"accel_version": "6.2", "torch": "2.4"}
IMAGE_ID = "sha256:" + "e3" * 32


def rendered(**request) -> dict:
    """The manifest of the context these `envbuild image` flags render (nothing written)."""
    _, manifest = context_files(resolve(Request(**request)), StaticFiles.read())
    return manifest


def record(status: str = "pass", *, manifest: dict | None = None, **changes) -> dict:
    """A build record as `envbuild image` writes it, for the cpu cell's context unless `manifest` says otherwise."""
    manifest = manifest or rendered(**CPU)
    doc = {
        "format": "envbuild-build-record",
        "schema_version": 1,
        "build_id": uuid.uuid4().hex,
        "cell": manifest["cell"],
        "request": request_of(manifest),
        "context_hash": manifest["context_hash"],
        "wheelhouse": wheelhouse_of(manifest),
        "recipe_hash": manifest["recipe_hash"],
        "image_tag": manifest["image_tag"],
        "status": status,
        "failure": None,
        "started_at": "2026-12-05T10:00:00Z",
        "finished_at": "2026-12-05T10:09:30Z",
        "wall_time_s": 570.0,
        "memory": {
            "scope": "host",
            "peak_bytes": 4 << 30,
            "start_bytes": 1 << 30,
            "total_bytes": 24 << 30,
            "samples": 570,
            "interval_s": 1.0,
        },
        "compile_jobs": None,
        "ccache": {"measured": False, "note": "not measured: no step of this build printed ccache statistics"},
        "image": {"digest": IMAGE_ID, "tag": manifest["image_tag"]} if status == "pass" else None,
        "verify_checks": 5 if status == "pass" else None,
        "base": {"image": manifest["base_image"], "digest": "sha256:" + "b1" * 32},
        "builder": {"tool": "DOCKER_BUILDKIT=1 docker build (/usr/bin/docker)", "envbuild_version": "0.1.0"},
    }
    if status == "fail":
        doc["failure"] = {
            "failure_class": "compile_error",
            "step": "[base 3/10] RUN bash /opt/envbuild/common/refresh_apt_key.sh",
            "message": "exit code: 3",
            "hint": "a native build failed: read the last lines of the step above",
            "log_tail": ["compiling <script>alert(1)</script> & more", "fatal error: injected.h: No such file"],
            "evidence": [],
        }
    return {**doc, **changes}


def write_record(folder: Path, doc: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / BUILD_RECORD
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return path


def make_key(path: Path, comment: str) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
    return path


def signer_line(principal: str, key: Path) -> str:
    return f'{principal} namespaces="envbuild" {" ".join(Path(f"{key}.pub").read_text().split()[:2])}\n'
