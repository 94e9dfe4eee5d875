"""Which GPU archs the code objects of a path here or of an image cover (workload.binaries.code_object_reader,
standard library only). For an image the reader runs inside a container of it, with the image's own python, no
network, the arch as an argument (never through a shell), and an engine log of bounded size: an image envbuild did
not build may print without end. The image's verify record (/opt/envbuild/verify.json) comes back with it."""

from __future__ import annotations

import json
from pathlib import Path

_IN_IMAGE = """
import json, pathlib, sys
from workload.binaries.code_object_reader import library_dirs, loaded_split
loaded, other = loaded_split(*library_dirs(), sys.argv[1] or None)
verify = pathlib.Path("/opt/envbuild/verify.json")
print(json.dumps({"verify": json.loads(verify.read_text()) if verify.is_file() else None,
                  "coverage": {**loaded.to_json(), "not_loaded": other.to_json()}}))
"""
#: The scan container's engine log: its one JSON line fits many times over.
_LOG_CONFIG = {"type": "json-file", "config": {"max-size": "10m", "max-file": "1"}}


class ImageNotFound(Exception):
    """The engine has no image of that reference."""


class ScanFailed(Exception):
    """The scan failed inside the image; the message ends with its stderr."""


def scan_path(path: Path, arch: str | None) -> dict:
    """The coverage of every GPU binary and kernel library under `path` (PermissionError passes through)."""
    from workload.binaries.code_object_reader import coverage

    return coverage([path], arch).to_json()


def scan_image(ref: str, arch: str | None) -> tuple[dict, dict | None, str | None]:
    """(coverage, verify record or None, the arch checked: `arch`, else the image's io.envbuild.arch label) from a
    container of `ref`; the coverage judges what torch loads and lists the rest under `not_loaded`.
    EngineUnavailable, ImageNotFound and ScanFailed."""
    import docker.errors

    from builder.engine.docker import docker_client

    client = docker_client()
    try:
        image = client.images.get(ref)
    except docker.errors.ImageNotFound:
        raise ImageNotFound(ref) from None
    arch = arch or (image.labels or {}).get("io.envbuild.arch") or None
    try:
        raw = client.containers.run(
            ref,
            ["python", "-c", _IN_IMAGE, arch or ""],
            entrypoint=[],
            remove=True,
            network_mode="none",
            environment={"PYTHONPATH": "/opt/envbuild"},
            log_config=_LOG_CONFIG,
        )
    except docker.errors.ContainerError as exc:
        raise ScanFailed(f"the scan failed inside {ref}: {exc.stderr.decode(errors='replace')[-500:]}") from None
    record = json.loads(raw.decode())
    return record["coverage"], record["verify"], arch
