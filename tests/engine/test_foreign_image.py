"""Docker images envbuild did not render, measured as they are (a real engine, real images built here from the
local base with pip's CPU torch; see foreign_images.py): the image's own torch runs, the workload and the packages
the image lacks come in read-only, the probes name the cell, the record names the image by its id."""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner

from builder.cli import main
from foreign_images import MARKED_VERSION, cuda_says_image, no_peft_image, plain_torch_image
from shared_builds import one_build_at_a_time

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def images(local_base, docker_engine, tmp_path_factory):
    work = tmp_path_factory.mktemp("foreign-images")
    with one_build_at_a_time(tmp_path_factory, "foreign-torch"):
        plain = plain_torch_image(local_base, work)
    return {
        "plain": plain,
        "nopeft": no_peft_image(plain, work),
        "cuda": cuda_says_image(plain, work),
        "client": docker_engine,
    }


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One cache of brought-in packages for the module, as on a user's machine: the first run fills it, the others
    find their packages there."""
    root = tmp_path_factory.mktemp("foreign-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(root))
        yield root / "envbuild" / "deps"


def _run(*args: str):
    return CliRunner().invoke(main, ["run", "workload", *args])


def test_a_plain_torch_image_runs_its_own_torch_with_the_workload_brought_in(images, cache, tmp_path):
    out, db = tmp_path / "run", tmp_path / "m.db"
    ran = _run("--image", images["plain"], "--out", str(out), "--db", str(db))
    assert ran.exit_code == 0, ran.output[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "pass"
    assert result["versions"]["torch"] == MARKED_VERSION  # the image's torch: no other torch says this
    image = result["image"]
    assert image["probe"]["torch_path"] == "/usr/local/lib/python3.11/dist-packages/torch/__init__.py"
    assert image["id"] == images["client"].images.get(images["plain"]).id == image["digest"]
    assert (image["tag"], image["origin"], image["manifest"], image["vendor"]) == (
        images["plain"],
        "foreign",
        None,
        None,
    )
    brought = image["brought_in"]["packages"]
    assert brought["transformers"] == "5.24.0" and brought["peft"] == "0.21.2" and "torch" not in brought
    assert "sympy" not in brought  # the image's own (torch's dependency): never replaced
    [deps] = [p for p in cache.iterdir() if p.name.startswith("torch2.13-py3.11-")]
    assert (deps / "transformers").is_dir() and not (deps / "torch").exists()
    assert not list(out.parent.glob(".envbuild-src-*"))  # the workload's copy is gone after the run
    with sqlite3.connect(db) as conn:
        assert conn.execute(
            "SELECT cells.key, runs.image_digest FROM runs JOIN cells ON cells.id = runs.cell_id"
        ).fetchall() == [("cpu-torch2.13-py3.11", image["id"])]


def test_an_image_that_lacks_peft_is_exit_2_offline_naming_it(images, cache, tmp_path):
    empty = tmp_path / "wheels"
    empty.mkdir()
    out, db = tmp_path / "run", tmp_path / "m.db"
    ran = _run("--image", images["nopeft"], "--wheels", str(empty), "--out", str(out), "--db", str(db))
    assert ran.exit_code == 2, ran.output
    assert "the image lacks peft==0.21.2 " in ran.output and "--wheels DIR" in ran.output
    assert "transformers" not in ran.output.split("the image lacks")[1].split("(")[0]  # only what it lacks
    assert not db.exists() and not out.exists()


def test_a_cuda_torch_that_ran_on_the_cpu_is_no_gpu_verdict(images, cache, tmp_path):
    """A real torch whose build says CUDA 13.0 (version.py edited, as a CUDA wheel reports itself) on a host with
    no GPU: the run is recorded under the cpu cell as a CPU measurement of that build; no cuda cell appears and the
    report suggests no render command the recipes would refuse. It proves the cell logic on a real probe and a real
    run; it does not prove what a real CUDA wheel's kernels do on such a host."""
    out, db, site = tmp_path / "run", tmp_path / "m.db", tmp_path / "site"
    ran = _run("--image", images["cuda"], "--out", str(out), "--db", str(db))
    assert "no CUDA GPU" in ran.output and "CPU measurement" in ran.output
    result = json.loads((out / "result.json").read_text())
    assert (result["versions"]["torch"], result["versions"]["cuda"]) == ("2.13.0+cu130", "13.0")
    assert result["hardware"]["device_type"] == "cpu"
    with sqlite3.connect(db) as conn:
        assert [k for (k,) in conn.execute("SELECT key FROM cells")] == ["cpu-torch2.13-py3.11"]
    # this run's matrix alone (no recipe cells, no published results): no cuda cell comes from it
    report = CliRunner().invoke(main, ["report", "-o", str(site), "--db", str(db), "--no-recipes", "--no-results"])
    assert report.exit_code == 0, report.output
    page = (site / "cells" / "cpu-torch2.13-py3.11.html").read_text()
    assert "a CPU measurement of it" in page and "2.13.0+cu130" in page
    assert "--cuda" not in page and "cuda13.0" not in (site / "index.html").read_text()


def test_an_amd_named_local_image_is_shown_by_its_name_origin_unverified(images, cache, tmp_path):
    """The same real image under AMD's name (a local tag, so no RepoDigest): shown by its name, never as AMD's."""
    tag = "rocm/pytorch:envbuild-test-cpu"
    images["client"].images.get(images["nopeft"]).tag("rocm/pytorch", "envbuild-test-cpu")
    try:
        out, db, site = tmp_path / "run", tmp_path / "m.db", tmp_path / "site"
        ran = _run("--image", tag, "--out", str(out), "--db", str(db), "--", "--max-steps", "2", "--no-probes")
        assert ran.exit_code in (0, 1), ran.output[-2000:]
        label = f"{tag} (a local name: origin unverified)"
        assert json.loads((out / "result.json").read_text())["image"]["vendor"] == label
        assert CliRunner().invoke(main, ["report", "-o", str(site), "--db", str(db)]).exit_code == 0
        page = (site / "cells" / "cpu-torch2.13-py3.11.html").read_text()
        assert label in page and "AMD image" not in page
    finally:
        images["client"].images.remove(tag)
