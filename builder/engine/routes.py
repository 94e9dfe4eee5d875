"""The run routes, one table (`RUNNERS`: route name -> runner), and which route a request takes (`route_of`):

- `container`: an image `envbuild image` built (its manifest label); `foreign-docker`: any other image, measured as it
  is (builder.engine.foreign_docker);
- `apptainer`: a SIF with the record `envbuild sif` wrote beside it; `foreign-sif`: any other SIF, measured as it is;
- `local`: this Python, when it has the workload's packages; `managed`: else envbuild's own environment for this host;
- `venv`: a Python environment envbuild did not build, measured as it is.
"""

from __future__ import annotations

from pathlib import Path

from builder.engine.apptainer import SifRunner, sidecar_path
from builder.engine.container import ContainerRunner, image_labels_manifest, local_image
from builder.engine.docker import docker_client
from builder.engine.foreign_docker import ForeignImageRunner
from builder.engine.foreign_sif import ForeignSifRunner
from builder.engine.local_run import LocalRunner, MissingWorkloadPackages, check_workload_packages
from builder.engine.managed_run import ManagedRunner
from builder.engine.run_result import RunEnd
from builder.engine.runner import ContainerRun, Notify, RunRequest, Runner, SifRun, VenvRun
from builder.engine.venv_route import VenvRunner

RUNNERS: dict[str, Runner] = {
    "container": ContainerRunner(),
    "foreign-docker": ForeignImageRunner(),
    "apptainer": SifRunner(),
    "foreign-sif": ForeignSifRunner(),
    "local": LocalRunner(),
    "managed": ManagedRunner(),
    "venv": VenvRunner(),
}


def route_of(request: RunRequest) -> str:
    """The route `request` takes: its record's kind, then what the image, the SIF or this Python is. An image that is
    not here is a RunError (bad input); no engine, EngineUnavailable."""
    if isinstance(request, ContainerRun):
        image = local_image(docker_client(), request.image)
        return "container" if image_labels_manifest(image) is not None else "foreign-docker"
    if isinstance(request, SifRun):
        sif = Path(request.sif).resolve()
        return "foreign-sif" if sif.is_file() and not sidecar_path(sif).exists() else "apptainer"
    if isinstance(request, VenvRun):
        return "venv"
    try:
        check_workload_packages()
    except MissingWorkloadPackages:
        return "managed"
    return "local"


def run(request: RunRequest, notify: Notify) -> RunEnd:
    """Run `request` on its route (RUNNERS[route_of(request)])."""
    return RUNNERS[route_of(request)].run(request, notify)
