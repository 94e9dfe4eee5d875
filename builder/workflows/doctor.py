"""`envbuild doctor`: this host checked for GPU containers (builder.engine.doctor), as the host record every run
carries."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder.engine.doctor import FAIL, HostView, host_record


@dataclass(frozen=True)
class DoctorRequest:
    root: Path  # /sys, /proc, /dev and /etc are read below it
    flavor: str  # auto | rocm | cpu
    check_engine: bool
    site: Path | None


@dataclass(frozen=True)
class HostCheck:
    record: dict  # the host record: kernel, checks (name, status, detail, hint), gpu_archs, status

    @property
    def failed(self) -> bool:
        return self.record["status"] == FAIL


def check_host(request: DoctorRequest) -> HostCheck:
    view = HostView(root=request.root, check_engine=request.check_engine)
    return HostCheck(host_record(view, flavor=request.flavor, site_recipes=request.site))
