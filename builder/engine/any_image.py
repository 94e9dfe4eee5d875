"""Which run an image or SIF gets: envbuild's own (its manifest, or the `envbuild sif` record beside it) or the
measurement of an environment envbuild did not build (builder.engine.foreign)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from builder.engine import foreign_docker, foreign_sif
from builder.engine.apptainer import SifRun, run_in_sif, sidecar_path
from builder.engine.container import (
    ContainerRun,
    check_data,
    image_labels_manifest,
    local_image,
    resolve_model,
    run_in_container,
)
from builder.engine.docker import docker_client
from builder.engine.doctor import HostView
from builder.engine.run_result import RunEnd


def run_image(run: ContainerRun, console: Console) -> RunEnd:
    """`--image TAG`: an image with an envbuild manifest runs as built; any other is probed and completed."""
    client = docker_client()
    image = local_image(client, run.image)
    if image_labels_manifest(image) is not None:
        return run_in_container(run, console)
    hub_id, model_dir = resolve_model(run.model)
    data = check_data(run.data)
    return foreign_docker.run(client, image, run, console, HostView(), hub_id, model_dir, data)


def run_sif(run: SifRun, console: Console) -> RunEnd:
    """`--apptainer SIF`: a SIF with its `envbuild sif` record runs as made; any other is probed and completed."""
    sif = Path(run.sif).resolve()
    if sif.is_file() and not sidecar_path(sif).exists():
        return foreign_sif.run(sif, run, console, HostView())
    return run_in_sif(run, console)
