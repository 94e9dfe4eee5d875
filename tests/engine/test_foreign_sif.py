"""A SIF envbuild did not make, measured as it is on the one-node Slurm + Apptainer cluster (.ci/hpc_cluster.sh):
the plain Debian + pip torch image (foreign_images.py) saved and built into a SIF with `apptainer build` directly,
no `envbuild sif` and no record beside it. The run names it by its sha256, runs its own torch, and brings the
workload and the packages it lacks in read-only. The jobs' user differs from the tests' (see test_hpc.py), so
everything the run reads or writes lives in a folder open to that user."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from foreign_images import MARKED_VERSION, plain_torch_image, sif_from_image
from hpc_fixtures import cluster_wrappers, job_user_folder
from shared_builds import one_build_at_a_time

pytestmark = [pytest.mark.docker, pytest.mark.hpc, pytest.mark.slow]


@pytest.fixture(scope="module")
def shared():
    bin_dir = cluster_wrappers("apptainer")
    with job_user_folder("envbuild-foreign-sif-") as path, pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        mp.setenv("XDG_CACHE_HOME", str(path / "cache"))
        yield path


@pytest.fixture(scope="module")
def foreign_sif(shared, local_base, docker_engine, tmp_path_factory) -> Path:
    with one_build_at_a_time(tmp_path_factory, "foreign-torch"):
        tag = plain_torch_image(local_base, tmp_path_factory.mktemp("foreign-sif-image"))
    return sif_from_image(docker_engine, tag, shared / "plain.sif", "apptainer", timeout=1200)


def test_a_sif_envbuild_did_not_make_runs_its_own_torch(foreign_sif, shared, tmp_path):
    out = shared / "run"
    out.mkdir()
    out.chmod(0o1777)
    db = tmp_path / "m.db"
    ran = CliRunner().invoke(
        main, ["run", "workload", "--apptainer", str(foreign_sif), "--out", str(out), "--db", str(db)]
    )
    assert ran.exit_code == 0, ran.output[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "pass" and result["versions"]["torch"] == MARKED_VERSION
    image = result["image"]
    sha = hashlib.sha256(foreign_sif.read_bytes()).hexdigest()
    assert image["sif"]["sha256"] == sha and image["digest"] == f"sha256:{sha}"
    assert (image["environment"], image["origin"], image["tag"]) == ("apptainer", "foreign", str(foreign_sif))
    assert image["probe"]["torch_path"] == "/usr/local/lib/python3.11/dist-packages/torch/__init__.py"
    assert "transformers" in image["brought_in"]["packages"] and "torch" not in image["brought_in"]["packages"]
    assert "HF_HUB_OFFLINE=1" in ran.output  # offline without --network
    [cell] = json.loads(CliRunner().invoke(main, ["matrix", "list", "--json", "--db", str(db)]).stdout)
    assert (cell["key"], cell["status"]) == ("cpu-torch2.13-py3.11", "pass")
    assert not list(shared.glob(".envbuild-src-*"))
