"""Where envbuild finds its data (recipes/, images/, workload/) and writes its state."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

#: The source tree holding recipes/, images/, ci/ and workload/ (an editable install points here).
REPO_ROOT = Path(os.environ.get("ENVBUILD_HOME", Path(__file__).resolve().parents[1]))
RECIPES_DIR = REPO_ROOT / "recipes"
IMAGES_DIR = REPO_ROOT / "images"
WORKLOAD_DIR = REPO_ROOT / "workload"
CI_TEMPLATES_DIR = REPO_ROOT / "ci"


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to a temp file beside `path`, fsync it, then rename it over `path`: a reader sees the old
    file or the new one, never half of one, and a failure leaves no temp file behind."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def file_sha256(path: Path) -> str:
    """The sha256 hex digest of a file, read in 1 MiB blocks (SIFs and wheels are hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
