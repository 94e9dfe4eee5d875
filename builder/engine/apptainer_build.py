"""SIFs without a Docker engine: build a rendered context's `cell.def` (`apptainer build --fakeroot`), or pull an
image that is already built (`apptainer pull docker://...`, a `docker save` tar, a SIF on a shared disk).

Either way the SIF gets the same record beside it as `envbuild sif IMAGE` writes (`<name>.sif.json`, read by
`run workload --apptainer` and `slurm submit`), with `route` saying how it was made, the plan's `context_hash`
(the same as a Docker-built image of the same request carries), the base it started from, the runtime
(Apptainer or SingularityCE) and its version, and the verify step's outcome inside the SIF.

What happens on the way is told to `notify`: plain lines of ours (what runs), and ToolLine for each step line
Apptainer prints during a build (as it wrote it: the CLI makes it safe to show).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from builder.engine.apptainer import (
    ApptainerError,
    apptainer_binary,
    run_checked,
    runtime_record,
    sidecar_path,
    verify_in_sif,
)
from builder.engine.build import MANIFEST_LABEL
from builder.engine.container import RunError
from builder.paths import file_sha256, write_text_atomic
from builder.plan.context import CONTEXT_HASH_LABEL
from builder.plan.render import DEFINITION, MANIFEST
from builder.plan.wheelhouse import WHEELHOUSE

CA_TARGET = "/run/secrets/envbuild_ca"
IMAGE_MANIFEST = "/opt/envbuild/manifest.json"  # where cell.def puts the context's manifest
BUILD_LOG_SUFFIX = ".build.log"
#: squashfs compressors (`mksquashfs -comp`) a build may pick instead of Apptainer's default, gzip: lz4 or zstd
#: trade a larger SIF for a much shorter squashfs step.
COMPRESSIONS = ("gzip", "lz4", "lzo", "xz", "zstd")
#: A path that goes into a bind spec (`SRC:DST:ro`) or a build argument that lands in the definition's
#: `From:` line: no separator of either (`:` `,`), no space, quote or control character.
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9_./+@%=-]{0,4000}")
#: `docker://` references as Apptainer takes them: [registry/]name[:tag][@sha256:digest].
_DOCKER_REF = re.compile(
    r"docker://(?P<name>[a-z0-9][a-z0-9._/-]{0,254}(?::[0-9]{1,5}/[a-z0-9._/-]+)?)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?"
)
_LABEL_HASH = re.compile(rf"^\s*{re.escape(CONTEXT_HASH_LABEL)}\s+([0-9a-f]{{64}})\s*$", re.M)


@dataclass(frozen=True)
class ToolLine:
    """One of Apptainer's own INFO/WARNING/FATAL/ERROR lines during a build, as it printed it (no line break)."""

    text: str


class SifBuildFailed(ApptainerError):
    """`apptainer build` of the definition ran and failed: the environment's outcome, not bad input."""


@dataclass(frozen=True)
class Base:
    """Where the definition's base comes from: the `Bootstrap:` agent and its `From:` source, as build arguments."""

    bootstrap: str  # docker | localimage | docker-archive
    source: str  # a registry reference, or an absolute path
    sha256: str | None = None  # of a local base file

    def record(self) -> dict:
        return {"bootstrap": self.bootstrap, "source": self.source, "sha256": self.sha256}


def local_base(path: Path) -> Base:
    """A base on this machine: a `docker save` tar (docker-archive), or a SIF or sandbox directory (localimage)."""
    path = Path(path).resolve()
    _plain(path, "--base")
    if path.is_dir():
        return Base("localimage", str(path))
    if not path.is_file():
        raise RunError(f"--base {path}: no such file or directory (a .sif, a sandbox directory or a `docker save` tar)")
    kind = "docker-archive" if tarfile.is_tarfile(path) else "localimage"
    return Base(kind, str(path), file_sha256(path))


def _plain(path: Path, option: str) -> str:
    if not _PLAIN_PATH.fullmatch(str(path)):
        raise RunError(
            f"{option} {str(path)!r}: use a path of letters, digits and _./+@%=- only (it goes into "
            "an Apptainer bind or build argument, where ':' ',' or spaces would change its meaning)"
        )
    return str(path)


def read_context(context_dir: Path) -> tuple[dict, Path]:
    """(manifest, cell.def path) of a rendered context; RunError unless the definition names the manifest's hash."""
    context_dir = Path(context_dir).resolve()
    definition, manifest_path = context_dir / DEFINITION, context_dir / MANIFEST
    if not definition.is_file() or not manifest_path.is_file():
        raise RunError(
            f"{context_dir} has no {DEFINITION} and {MANIFEST}: render it first "
            f"(`envbuild render ... -o {context_dir}`)"
        )
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunError(f"{manifest_path} is not readable JSON ({exc})") from None
    found = _LABEL_HASH.findall(definition.read_text(encoding="utf-8", errors="replace"))
    if not isinstance(manifest, dict) or not manifest.get("context_hash") or found != [manifest["context_hash"]]:
        raise RunError(
            f"{definition} and {manifest_path} name different content hashes: the context was edited "
            "after `envbuild render`; render it again"
        )
    return manifest, definition


def build_argv(
    binary: str,
    context_dir: Path,
    out: Path,
    base: Base | None,
    ca_cert: Path | None,
    fakeroot: bool,
    compression: str | None = None,
) -> list[str]:
    """`apptainer build` of the context's cell.def: the wheelhouse (and a proxy CA) bound read-only, the base as
    build arguments when it is not the definition's registry default."""
    context_dir = Path(context_dir).resolve()
    if compression is not None and compression not in COMPRESSIONS:
        raise RunError(f"--compression {compression!r}: choose one of {', '.join(COMPRESSIONS)}")
    argv = [
        binary,
        "build",
        *(["--fakeroot"] if fakeroot else []),
        "--force",
        *(["--mksquashfs-args", f"-comp {compression}"] if compression else []),
        "--bind",
        f"{_plain(context_dir / WHEELHOUSE, 'the context')}:/wheelhouse:ro",
    ]
    if ca_cert is not None:
        argv += ["--bind", f"{_plain(Path(ca_cert).resolve(), '--ca-cert')}:{CA_TARGET}:ro"]
    if base is not None:
        argv += ["--build-arg", f"BOOTSTRAP={base.bootstrap}", "--build-arg", f"BASE_IMAGE={base.source}"]
    return argv + [str(out), DEFINITION]


def build_from_context(
    context_dir: Path,
    out: Path,
    notify: Callable[[object], None],
    *,
    base: Base | None = None,
    ca_cert: Path | None = None,
    fakeroot: bool = True,
    compression: str | None = None,
) -> dict:
    """Build the SIF of a rendered context from its cell.def (no Docker engine), verify it inside, write its record.

    The full build output goes to `<out>.build.log`; Apptainer's own step lines go to `notify` as progress."""
    manifest, _ = read_context(context_dir)
    context_dir, out = Path(context_dir).resolve(), Path(out).resolve()
    binary = apptainer_binary()
    if ca_cert is not None and not Path(ca_cert).is_file():
        raise RunError(f"--ca-cert {ca_cert}: no such file")
    with _staging(out) as (work, tmp_sif):
        argv = build_argv(binary, context_dir, tmp_sif, base, ca_cert, fakeroot, compression)
        log_path = out.with_name(out.name + BUILD_LOG_SUFFIX)
        notify(
            f"{' '.join(argv[:2])} {DEFINITION} of {manifest.get('cell_key')} "
            f"(base: {base.source if base else 'the registry default'}); log: {log_path}"
        )
        started = time.monotonic()
        _streamed(argv, context_dir, log_path, notify)
        timings = {"apptainer_build_s": round(time.monotonic() - started, 1)}
        block = {"tag": manifest.get("image_tag"), "id": None, "digest": None, "manifest": manifest}
        base_record = base.record() if base else {"bootstrap": "docker", "source": manifest.get("base_image")}
        return _finish(
            binary,
            tmp_sif,
            work,
            out,
            timings,
            route="definition",
            image=block,
            extra={"base": base_record, "fakeroot": fakeroot, "compression": compression or "default"},
        )


def pull(source: str, out: Path, notify: Callable[[object], None]) -> dict:
    """A SIF of an image built elsewhere, with its record: `docker://REF` (apptainer pull), `docker-archive:TAR`,
    or a SIF path (copied). The image must be one `envbuild` built (its manifest label); its verify step runs
    again inside the SIF."""
    binary = apptainer_binary()
    kind, spec, digest = _pull_source(source)
    with _staging(out) as (work, tmp_sif):
        started = time.monotonic()
        if kind == "sif":
            notify(f"copying {spec}")
            shutil.copyfile(spec, tmp_sif)
        else:
            notify(f"{Path(binary).name} pull {tmp_sif.name} {spec}")
            run_checked([binary, "pull", "--force", str(tmp_sif), spec], work, f"{Path(binary).name} pull")
        timings = {"pull_s": round(time.monotonic() - started, 1)}
        manifest = _sif_manifest(binary, tmp_sif, work)
        if manifest is None:
            raise RunError(
                f"{source}: the image carries no envbuild manifest label ({MANIFEST_LABEL}): only images "
                "built by `envbuild image` (or SIFs of them) can be pulled with their record"
            )
        block = {"tag": manifest.get("image_tag"), "id": None, "digest": digest, "manifest": manifest}
        return _finish(
            binary,
            tmp_sif,
            work,
            out,
            timings,
            route="pull",
            image=block,
            extra={"pulled_from": source, "source_digest": digest},
        )


def _pull_source(source: str) -> tuple[str, str, str | None]:
    """(kind, what to give Apptainer, digest) of a --pull source; RunError when it is none of the three forms."""
    if source.startswith("docker://"):
        match = _DOCKER_REF.fullmatch(source)
        if not match:
            raise RunError(f"--pull {source!r} is not a docker:// reference ([registry/]name[:tag][@sha256:digest])")
        return "docker", source, match["digest"]
    if source.startswith("docker-archive:"):
        path = Path(source.removeprefix("docker-archive:").removeprefix("//")).resolve()
        if not path.is_file() or not tarfile.is_tarfile(path):
            raise RunError(f"--pull {source}: {path} is not a tar file (make one with `docker save IMAGE -o FILE`)")
        return "archive", f"docker-archive://{_plain(path, '--pull')}", _archive_digest(path)
    path = Path(source).resolve()
    if path.suffix == ".sif" and path.is_file():
        return "sif", str(path), f"sha256:{file_sha256(path)}"
    raise RunError(f"--pull {source!r}: give docker://REF, docker-archive:FILE.tar or an existing FILE.sif")


def _archive_digest(path: Path) -> str | None:
    """The image id (its config's digest) that a `docker save` archive names in its manifest.json."""
    try:
        with tarfile.open(path) as tar:
            member = tar.extractfile("manifest.json")
            entries = json.loads(member.read()) if member else None
    except (KeyError, tarfile.TarError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    config = (
        entries[0].get("Config") if isinstance(entries, list) and entries and isinstance(entries[0], dict) else None
    )
    match = re.fullmatch(r"(?:blobs/sha256/)?([0-9a-f]{64})(?:\.json)?", str(config or ""))
    return f"sha256:{match[1]}" if match else None


def _sif_manifest(binary: str, sif: Path, work: Path) -> dict | None:
    """The envbuild manifest of a SIF: among its labels (an OCI image's labels become the SIF's), or the file
    /opt/envbuild/manifest.json that a SIF built from cell.def holds."""
    proc = subprocess.run(
        [binary, "inspect", "--json", "--labels", str(sif)], cwd=work, capture_output=True, text=True, errors="replace"
    )
    try:
        text = json.loads(proc.stdout)["data"]["attributes"]["labels"][MANIFEST_LABEL]
    except (json.JSONDecodeError, KeyError, TypeError):
        proc = subprocess.run(
            [binary, "exec", "--cleanenv", "--containall", str(sif), "cat", IMAGE_MANIFEST],
            cwd=work,
            capture_output=True,
            text=True,
            errors="replace",
        )
        text = proc.stdout if proc.returncode == 0 else ""
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError:
        return None
    return manifest if isinstance(manifest, dict) else None


class _staging:
    """A work directory beside the SIF (as open as the SIF's own directory: Apptainer may run as another user
    there), holding the SIF until its record is written; removed afterwards."""

    def __init__(self, out: Path):
        self.out = Path(out).resolve()

    def __enter__(self) -> tuple[Path, Path]:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix=".envbuild-sif-", dir=self.out.parent))
        os.chmod(self.work, self.out.parent.stat().st_mode & 0o7777)
        return self.work, self.work / self.out.name

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.work, ignore_errors=True)


def _finish(
    binary: str, tmp_sif: Path, work: Path, out: Path, timings: dict, *, route: str, image: dict, extra: dict
) -> dict:
    started = time.monotonic()
    verify = verify_in_sif(binary, tmp_sif, work)
    timings["verify_s"] = round(time.monotonic() - started, 1)
    runtime = runtime_record(binary)
    record = {
        "schema_version": 1,
        "sif": Path(out).name,
        "sha256": file_sha256(tmp_sif),
        "size_bytes": tmp_sif.stat().st_size,
        "route": route,
        "context_hash": (image.get("manifest") or {}).get("context_hash"),
        "image": image,
        **extra,
        "runtime": runtime,
        "apptainer": runtime["version_line"],
        "verify": verify,
        "timings": timings,
    }
    out = Path(out).resolve()
    os.replace(tmp_sif, out)
    write_text_atomic(sidecar_path(out), json.dumps(record, indent=2) + "\n")
    os.chmod(sidecar_path(out), 0o644)
    return record


def _streamed(argv: list[str], cwd: Path, log_path: Path, notify: Callable[[object], None]) -> None:
    """Run `argv`, every line into `log_path`, Apptainer's own INFO/WARNING/FATAL/ERROR lines to `notify`."""
    with open(log_path, "w", encoding="utf-8", buffering=1) as log:
        proc = subprocess.Popen(
            argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1
        )
        tail: list[str] = []
        for line in proc.stdout:
            log.write(line)
            tail = (tail + [line])[-30:]
            if line.startswith(("INFO:", "WARNING:", "FATAL:", "ERROR:")):
                notify(ToolLine(line.rstrip()))
        code = proc.wait()
    if code != 0:
        raise SifBuildFailed(
            f"{' '.join(argv[:2])} failed (exit code {code}; full log {log_path}):\n" + "".join(tail).rstrip()
        )
