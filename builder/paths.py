"""Where envbuild finds its data (recipes/, images/, ci/, results/, workload/) and writes its state.

The data ships inside the package: builder/_data/ holds relative symlinks to the source tree's top-level
folders, which a wheel build follows (the wheel carries copies; the source tree stays the one copy) and an
editable install resolves into the tree. Both are read through importlib.resources, so an installed tool
and a clone behave the same. ENVBUILD_HOME=<a source tree> reads another tree's data instead.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from importlib.resources import files
from pathlib import Path


def _package_dir(package: str) -> Path:
    """The folder of an installed package (a wheel or an editable install: both are plain folders)."""
    return Path(str(files(package)))


_HOME = os.environ.get("ENVBUILD_HOME")
#: The root holding recipes/, images/, ci/ and results/: the package's data, or ENVBUILD_HOME's tree.
DATA_ROOT = Path(_HOME) if _HOME else _package_dir("builder") / "_data"
RECIPES_DIR = DATA_ROOT / "recipes"
#: The environment variable naming a site's recipe folder over RECIPES_DIR: the CLI reads it, with --recipes,
#: and passes the folder down (builder.cli.site_recipes); nothing else reads it.
RECIPES_ENV_VAR = "ENVBUILD_RECIPES"
IMAGES_DIR = DATA_ROOT / "images"
CI_TEMPLATES_DIR = DATA_ROOT / "ci"
RESULTS_DIR = DATA_ROOT / "results"
WORKLOAD_DIR = Path(_HOME) / "workload" if _HOME else _package_dir("workload")

#: The logs of a build or a run, in its output folder and in its attempt directory (docs/matrix.md "Attempts").
BUILD_LOG, CONTAINER_LOG, WORKLOAD_LOG = "build.log", "container.log", "workload.log"
#: A build's typed record (builder.store.build_record_schema), in its attempt directory and in results/.
BUILD_RECORD = "build-record.json"
#: A built image's SBOM (builder.sbom), its build provenance statement and that statement's signed envelope
#: (builder.attest.build_provenance): in the build's attempt directory and in results/ beside its build record.
SBOM_FILE, PROVENANCE_FILE, PROVENANCE_ENVELOPE = "sbom.cdx.json", "provenance.json", "provenance.intoto.jsonl"
#: The folder of a run's output folder that an image envbuild did not build writes into (its /out): new for each
#: run, so envbuild's own files (container.log, the final result.json) lie where the image cannot reach.
IMAGE_OUT = "from-image"

#: Environment variable naming the matrix database (the `--db` option reads it too).
DB_ENV_VAR = "ENVBUILD_DB"
DEFAULT_DB_NAME = "envbuild-matrix.db"


def default_db_path() -> Path:
    """`./envbuild-matrix.db` in the current directory: the matrix when neither --db nor $ENVBUILD_DB names one (the
    CLI reads both where it parses its options; the store never reads the environment)."""
    return Path(DEFAULT_DB_NAME)


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


def output_problem(path: Path, *, is_file: bool = False) -> str | None:
    """Why `path` (a directory, or a file with `is_file`) cannot be created or replaced here, or None when it can;
    nothing is created (a temporary file is made and removed in the nearest folder that exists)."""
    existing = _nearest_existing(Path(path))
    try:
        if existing == Path(path).absolute():
            if is_file and existing.is_dir():
                return f"{path} is a directory; give a file path"
            if not is_file and not existing.is_dir():
                return f"{path} is a file; give a directory"
            if is_file and not os.access(existing, os.W_OK):
                raise PermissionError(13, "Permission denied")
        elif not existing.is_dir():
            return f"{existing} is a file, so {path} cannot be created"
        with tempfile.NamedTemporaryFile(
            dir=existing if existing.is_dir() else existing.parent, prefix=".envbuild-write-test-"
        ):
            pass
    except OSError as exc:
        return f"cannot write {path} ({exc.strerror or exc}); pick a directory you can write"
    return None


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
