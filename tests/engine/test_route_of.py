"""builder/engine/routes.py: which route a request takes. An image's route is read from the engine's record of the
image (recorded here as the Docker SDK holds it: the engine is not needed to tell the routes apart)."""

from __future__ import annotations

import json
import sys

import docker.errors
import pytest
from docker.models.images import Image

from builder.engine import routes
from builder.engine.apptainer import sidecar_path
from builder.engine.container import MANIFEST_LABEL, RunError
from builder.engine.docker import EngineUnavailable
from builder.engine.local_run import _DISTRIBUTIONS
from builder.engine.runner import ContainerRun, RunRequest, SifRun, VenvRun


class _Images:
    def __init__(self, found: dict[str, Image]):
        self.found = found

    def get(self, tag: str) -> Image:
        if tag not in self.found:
            raise docker.errors.ImageNotFound(f"No such image: {tag}")
        return self.found[tag]


class _Engine:
    def __init__(self, **found: Image):
        self.images = _Images(found)


def _image(labels: dict | None) -> Image:
    return Image(attrs={"Id": "sha256:" + "1" * 64, "RepoTags": [], "Config": {"Labels": labels}})


def test_an_image_with_envbuild_s_manifest_takes_the_container_route_any_other_the_foreign_one(tmp_path, monkeypatch):
    built = _image({MANIFEST_LABEL: json.dumps({"rocm": "6.2"})})
    engine = _Engine(built=built, other=_image({"org.opencontainers.image.title": "x"}), bare=_image(None))
    monkeypatch.setattr(routes, "docker_client", lambda: engine)
    assert routes.route_of(ContainerRun(out_dir=tmp_path, image="built")) == "container"
    assert routes.route_of(ContainerRun(out_dir=tmp_path, image="other")) == "foreign-docker"
    assert routes.route_of(ContainerRun(out_dir=tmp_path, image="bare")) == "foreign-docker"
    with pytest.raises(RunError, match="image absent not found locally"):
        routes.route_of(ContainerRun(out_dir=tmp_path, image="absent"))


def test_an_image_run_without_an_engine_is_engine_unavailable(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    with pytest.raises(EngineUnavailable):
        routes.route_of(ContainerRun(out_dir=tmp_path, image="any:1"))


def test_a_sif_with_its_record_beside_it_is_envbuild_s_any_other_is_foreign(tmp_path, monkeypatch):
    sif = tmp_path / "cell.sif"
    sif.write_bytes(b"SIF")
    assert routes.route_of(SifRun(out_dir=tmp_path, sif=sif)) == "foreign-sif"
    sidecar_path(sif).write_text("{}")
    assert routes.route_of(SifRun(out_dir=tmp_path, sif=sif)) == "apptainer"
    monkeypatch.chdir(tmp_path)
    assert routes.route_of(SifRun(out_dir=tmp_path, sif="cell.sif")) == "apptainer"  # relative to where it runs
    # a SIF that is not there goes to envbuild's route, which says it is missing
    assert routes.route_of(SifRun(out_dir=tmp_path, sif=tmp_path / "absent.sif")) == "apptainer"
    (tmp_path / "folder.sif").mkdir()
    assert routes.route_of(SifRun(out_dir=tmp_path, sif=tmp_path / "folder.sif")) == "apptainer"


def test_a_venv_takes_the_venv_route(tmp_path):
    assert routes.route_of(VenvRun(out_dir=tmp_path, venv=tmp_path)) == "venv"


def test_a_run_here_is_local_when_this_python_has_the_workload_s_packages_else_managed(tmp_path, monkeypatch):
    assert routes.route_of(RunRequest(out_dir=tmp_path)) == "local"  # the test venv has the workload extra
    monkeypatch.setitem(sys.modules, next(iter(_DISTRIBUTIONS)), None)  # as if it could not be imported
    assert routes.route_of(RunRequest(out_dir=tmp_path)) == "managed"


def test_every_route_has_its_runner():
    assert set(routes.RUNNERS) == {
        "container",
        "foreign-docker",
        "apptainer",
        "foreign-sif",
        "local",
        "managed",
        "venv",
    }
