"""`envbuild sif`: a cell's SIF for Apptainer/SingularityCE sites, with its record (PATH.sif.json): from a built Docker
image, from a rendered context's cell.def with no Docker engine, or pulled (builder.engine.apptainer and
apptainer_build). What happens on the way is told to `notify`: plain lines, and ToolLine (a line Apptainer printed
during a build)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from builder.engine.apptainer_build import COMPRESSIONS, ToolLine
from builder.workflows.errors import BadInput

__all__ = ["COMPRESSIONS", "SifMade", "SifNotMade", "SifRequest", "ToolLine", "make_sif"]


@dataclass(frozen=True)
class SifRequest:
    image: str | None  # a built image (docker save -> apptainer build)
    context_dir: Path | None  # a rendered context whose cell.def is built
    source: str | None  # docker://REF, docker-archive:FILE.tar or FILE.sif, pulled
    base_path: Path | None  # with context_dir: the base from this machine
    ca_cert: Path | None  # with context_dir: a proxy's CA, bound read-only during the build
    fakeroot: bool
    compression: str | None  # the squashfs compressor (an image or a context)
    out: Path  # PATH.sif; its record goes beside it as PATH.sif.json


@dataclass(frozen=True)
class SifMade:
    """The SIF and its record (sha256, size, route, runtime, timings, and the image's verify step run inside it)."""

    out: Path
    record: dict

    @property
    def verified(self) -> bool:
        return bool(self.record["verify"]["ok"])


@dataclass(frozen=True)
class SifNotMade:
    """The build or pull failed (exit code 1); the message says where."""

    message: str


def make_sif(request: SifRequest, notify: Callable[[object], None]) -> SifMade | SifNotMade:
    """The SIF the request asks for, telling `notify` what runs. A request
    that names no source or two, options that do not go with its source, an out path that is no new .sif, an unknown
    image or context and a missing apptainer are BadInput (exit 2)."""
    from builder.engine.apptainer import build_sif
    from builder.engine.apptainer_build import SifBuildFailed, build_from_context, local_base, pull
    from builder.engine.container import RunError
    from builder.engine.docker import EngineUnavailable

    _check(request)
    try:
        if request.context_dir is not None:
            base = local_base(request.base_path) if request.base_path is not None else None
            record = build_from_context(
                request.context_dir,
                request.out,
                notify,
                base=base,
                ca_cert=request.ca_cert,
                fakeroot=request.fakeroot,
                compression=request.compression,
            )
        elif request.source is not None:
            record = pull(request.source, request.out, notify)
        else:
            record = build_sif(request.image, request.out, notify, compression=request.compression)
    except SifBuildFailed as exc:
        return SifNotMade(str(exc))
    except (RunError, EngineUnavailable) as exc:
        raise BadInput(str(exc)) from exc
    return SifMade(request.out, record)


def _check(request: SifRequest) -> None:
    if sum(x is not None for x in (request.image, request.context_dir, request.source)) != 1:
        raise BadInput("give exactly one of IMAGE, --from-context DIR or --pull SOURCE")
    if request.context_dir is None and (request.base_path or request.ca_cert or not request.fakeroot):
        raise BadInput("--base, --ca-cert and --no-fakeroot go with --from-context DIR")
    if request.source is not None and request.compression:
        raise BadInput("--compression goes with IMAGE or --from-context DIR (a pull keeps the SIF it gets)")
    if not request.out.name.endswith(".sif"):
        raise BadInput(f"-o {request.out}: the SIF's file name must end in .sif")
    if request.out.exists():
        raise BadInput(f"-o {request.out}: exists already (SIFs are never overwritten); pick another path or remove it")
