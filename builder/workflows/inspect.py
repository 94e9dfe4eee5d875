"""`envbuild inspect TARGET`: which GPU archs the code objects of a path here or of an image cover, and whether the
arch asked for is among them (builder.engine.code_objects)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder.engine.code_objects import ImageNotFound, ScanFailed, scan_image, scan_path
from builder.engine.docker import EngineUnavailable
from builder.plan.image_ref import is_image_reference
from builder.workflows.errors import BadInput, BadRequest, Failed


@dataclass(frozen=True)
class InspectRequest:
    target: str  # a file or directory here, or an image reference
    arch: str | None  # the arch that must be covered (an image: default its io.envbuild.arch label)


@dataclass(frozen=True)
class Coverage:
    coverage: (
        dict  # binaries, library_files, archs, arch, verdict (present | missing | unknown), missing_in[, not_loaded]
    )
    verify: dict | None  # an image's own verify record
    arch: str | None  # the arch checked

    @property
    def missing(self) -> bool:
        """An arch was checked and is not present everywhere it must be (missing or unknown)."""
        return self.arch is not None and self.coverage["verdict"] != "present"


def inspect_target(request: InspectRequest) -> Coverage:
    path = Path(request.target)
    if path.exists():
        try:
            return Coverage(scan_path(path, request.arch), None, request.arch)
        except PermissionError as exc:
            raise BadRequest(f"{request.target}: {exc.strerror}") from exc
    if not is_image_reference(request.target):
        raise BadRequest(f"{request.target!r}: no such file or directory, and not an image reference either")
    try:
        return Coverage(*scan_image(request.target, request.arch))
    except ImageNotFound:
        raise BadRequest(f"{request.target!r} is neither a path here nor a local image (docker images)") from None
    except EngineUnavailable as exc:
        raise BadInput(str(exc)) from exc
    except ScanFailed as exc:
        raise Failed(str(exc)) from exc
