"""The HPC path on a real one-node Slurm with Apptainer (.ci/hpc_cluster.sh): the cpu cell's image as a SIF,
`run workload --apptainer`, and a job array of three tasks collected into the matrix and the report; and the
route without Docker: the same cell's SIF built from its rendered cell.def with `apptainer build --fakeroot`
(as the job user, on the "login node": the cluster's namespaces with the host's network), from the Docker
route's own local base as a `docker save` tar, run, submitted as an array, pulled, and recognised by its
content hash as the same cell as the Docker-built image.

The cluster's wrappers (sbatch, sacct, apptainer, ... entering its namespaces as the job user) are found in
$ENVBUILD_HPC_BIN (default /run/envbuild-hpc/bin). Without them these tests skip, except under
ENVBUILD_REQUIRE_HPC=1 (as CI sets): then they fail. The jobs run as an unprivileged user while the tests
run as root, so what the jobs read or write lives in a temporary directory of its own under /tmp, open to
that user (pytest's own tmp root is kept 0700 by every pytest that starts), removed after the module; at a
site one user owns both sides.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.store.store import MatrixStore
from hpc_fixtures import cluster_wrappers, job_user_folder

pytestmark = [pytest.mark.docker, pytest.mark.hpc, pytest.mark.slow]
CA = Path("/etc/ssl/certs/ca-certificates.crt")
CELL = "cpu-torch2.13-py3.11"
#: Two configurations that end in a verdict each (pass; fail by did_not_learn) and one that outlives the
#: one-minute time limit (TIMEOUT: an attempt). Two steps keep the others well inside the minute (11 s here).
#: `long` is the highest --epochs (1.7 million steps): 400 epochs (6,800 steps) were at step 3,762 of 6,800 when
#: the limit struck here, and a faster machine finished them inside the minute (CI: no TIMEOUT, no --resubmit).
CONFIGS = {
    "quick": "--max-steps 2 --min-accuracy 0 --no-probes",
    "strict": "--max-steps 2 --min-accuracy 0.99 --no-probes",
    "long": "--epochs 10000 --no-probes",
}


@pytest.fixture(scope="module")
def shared_dir():
    """A temporary directory the job user can write (see the module doc), removed afterwards."""
    with job_user_folder("envbuild-hpc-test-") as path:
        yield path


def _open_to_job_user(path: Path) -> Path:
    path.mkdir()
    path.chmod(0o1777)
    return path


@pytest.fixture(scope="module")
def hpc_env():
    bin_dir = cluster_wrappers("sbatch", "sacct", "apptainer", slurm_answers=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        yield bin_dir


#: Where the .def route runs: a DOCKER_HOST that answers nothing, so any use of a Docker engine fails the build.
NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/envbuild-no-docker.sock"}


@pytest.fixture(scope="module")
def def_sif(hpc_env, local_base, docker_engine, shared_dir):
    """(SIF path, seconds) of the cpu cell built from its cell.def, the same request as `cpu_cell_image`, with
    no Docker engine; its base is that image's base (`docker save`d beforehand, as a site would copy a tar)."""
    base = shared_dir / "base.tar"
    with open(base, "wb") as handle:
        for chunk in docker_engine.images.get(local_base).save(named=True):
            handle.write(chunk)
    base.chmod(0o644)
    ctx = shared_dir / "def-ctx"
    command = ["render", "--flavor", "cpu", "--torch", "2.13", "--base-image", local_base, "-o", str(ctx)]
    if Path("/opt/wheels").is_dir():
        command += ["--wheelhouse", "/opt/wheels"]
    rendered = CliRunner().invoke(main, command)
    assert rendered.exit_code == 0, rendered.output
    ca = shared_dir / "ca.pem"  # the proxy CA, bound into the build (never copied into the SIF)
    shutil.copyfile(CA, ca)
    ca.chmod(0o644)
    sif = shared_dir / "cpu-def.sif"
    started = time.monotonic()
    # lz4: the squashfs step of a 1.4 GB tree takes minutes with Apptainer's default gzip on 2 cores
    made = CliRunner().invoke(
        main,
        [
            "sif",
            "--from-context",
            str(ctx),
            "--base",
            str(base),
            "--ca-cert",
            str(ca),
            "--compression",
            "lz4",
            "-o",
            str(sif),
        ],
        env={**NO_DOCKER, "ENVBUILD_APPTAINER": str(hpc_env / "login-apptainer")},
    )
    assert made.exit_code == 0, made.output + _tail(sif.with_name(sif.name + ".build.log"))
    return sif, time.monotonic() - started


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.is_file() else ""


def test_the_definition_route_builds_without_docker(def_sif):
    sif, seconds = def_sif
    record = json.loads(sif.with_name(sif.name + ".json").read_text())
    assert record["route"] == "definition" and record["verify"]["ok"] is True and record["verify"]["checks"] >= 5
    assert record["sha256"] == hashlib.sha256(sif.read_bytes()).hexdigest()
    assert record["base"]["bootstrap"] == "docker-archive" and len(record["base"]["sha256"]) == 64
    assert (record["runtime"]["name"], record["runtime"]["version"].split(".")[0]) == ("apptainer", "1")
    labels = subprocess.run(
        ["apptainer", "inspect", "--json", "--labels", str(sif)], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(labels)["data"]["attributes"]["labels"]["io.envbuild.context-hash"] == record["context_hash"]
    print(f"envbuild sif --from-context: {seconds:.0f} s ({record['timings']})")


def test_a_definition_built_sif_runs_the_workload_and_a_slurm_array(def_sif, shared_dir, tmp_path):
    sif, _ = def_sif
    out = _open_to_job_user(shared_dir / "def-run")
    db = tmp_path / "m.db"
    ran = CliRunner().invoke(
        main,
        [
            "run",
            "workload",
            "--apptainer",
            str(sif),
            "--out",
            str(out),
            "--db",
            str(db),
            "--",
            *CONFIGS["quick"].split(),
        ],
        env=NO_DOCKER,
    )
    assert ran.exit_code == 0, ran.output
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "pass" and result["image"]["environment"] == "apptainer"
    assert (
        result["image"]["manifest"]["context_hash"]
        == json.loads(sif.with_name(sif.name + ".json").read_text())["context_hash"]
    )
    assert result["image"]["sif"]["route"] == "definition" and result["image"]["runtime"]["name"] == "apptainer"

    results = _open_to_job_user(shared_dir / "def-results")
    submitted = CliRunner().invoke(
        main,
        [
            "slurm",
            "submit",
            "--sif",
            str(sif),
            "--config",
            f"quick={CONFIGS['quick']}",
            "--config",
            f"again={CONFIGS['quick']}",
            "--results-dir",
            str(results),
            "--db",
            str(db),
        ],
        env=NO_DOCKER,
    )
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.strip()
    _wait_finished(job_id, 2)
    collected = CliRunner().invoke(main, ["slurm", "collect", job_id, "--db", str(db)], env=NO_DOCKER)
    assert collected.exit_code == 0, collected.output
    with MatrixStore.open(db, readonly=True) as store:
        runs = [r for r in store.runs() if "slurm" in (r["result"].get("host") or {})]
    assert sorted((r["result"]["host"]["slurm"]["state"], r["result"]["status"]) for r in runs) == [
        ("COMPLETED", "pass"),
        ("COMPLETED", "pass"),
    ]


def test_pull_copies_a_sif_verifies_it_again_and_names_who_ran_it(def_sif, hpc_env, shared_dir):
    """--pull of a SIF on a shared disk (no registry here), run through the `singularity` name: Debian's
    apptainer package installs it as an alternative name, and the record names the runtime by its --version."""
    sif, _ = def_sif
    pulled = shared_dir / "pulled.sif"
    made = CliRunner().invoke(
        main,
        ["sif", "--pull", str(sif), "-o", str(pulled)],
        env={**NO_DOCKER, "ENVBUILD_APPTAINER": str(hpc_env / "singularity")},
    )
    assert made.exit_code == 0, made.output
    record = json.loads(pulled.with_name("pulled.sif.json").read_text())
    source = json.loads(sif.with_name(sif.name + ".json").read_text())
    assert record["route"] == "pull" and record["verify"]["ok"] is True
    assert record["source_digest"] == f"sha256:{source['sha256']}" and record["context_hash"] == source["context_hash"]
    assert record["runtime"]["name"] == "apptainer" and record["runtime"]["path"].endswith("/singularity")


def test_pull_refuses_an_image_envbuild_did_not_build(def_sif, shared_dir, tmp_path):
    """A docker-archive pull (Apptainer's own conversion, no registry) of the bare base: no manifest, exit 2."""
    made = CliRunner().invoke(
        main,
        ["sif", "--pull", f"docker-archive:{shared_dir / 'base.tar'}", "-o", str(shared_dir / "base-pulled.sif")],
        env=NO_DOCKER,
    )
    assert made.exit_code == 2 and "no envbuild manifest" in made.output, made.output
    assert not (shared_dir / "base-pulled.sif").exists()


def test_the_definition_built_sif_names_the_docker_images_content_hash(def_sif, cpu_cell_image, docker_engine):
    """The same request, the same cell: the SIF built from cell.def and the image BuildKit built share a hash."""
    sif, _ = def_sif
    record = json.loads(sif.with_name(sif.name + ".json").read_text())
    docker_labels = docker_engine.images.get(cpu_cell_image).labels
    assert record["context_hash"] == docker_labels["io.envbuild.context-hash"]
    assert "org.envbuild.context-hash" not in docker_labels  # one name for the hash (the legacy one is only read)
    assert record["image"]["tag"] == cpu_cell_image


@pytest.fixture(scope="module")
def cpu_sif(cpu_cell_image, hpc_env, shared_dir):
    """(SIF path, seconds of `envbuild sif`) for the cpu cell's image."""
    sif = shared_dir / "cpu.sif"
    started = time.monotonic()
    made = CliRunner().invoke(main, ["sif", cpu_cell_image, "--compression", "lz4", "-o", str(sif)])
    assert made.exit_code == 0, made.output
    return sif, time.monotonic() - started


def test_sif_records_its_sha256_and_verifies_inside_apptainer(cpu_sif):
    sif, seconds = cpu_sif
    record = json.loads(sif.with_name("cpu.sif.json").read_text())
    assert record["sha256"] == hashlib.sha256(sif.read_bytes()).hexdigest()
    assert record["verify"]["ok"] is True and record["verify"]["checks"] >= 5
    assert record["image"]["manifest"]["cell_key"] == CELL
    assert record["apptainer"].startswith("apptainer version 1.")
    assert record["route"] == "docker-archive" and record["runtime"]["name"] == "apptainer"
    assert record["context_hash"] == record["image"]["manifest"]["context_hash"]
    print(f"envbuild sif: {seconds:.0f} s ({record['timings']})")


def test_run_workload_apptainer_passes_on_the_cpu_cell(cpu_sif, shared_dir, tmp_path):
    sif, _ = cpu_sif
    out = _open_to_job_user(shared_dir / "run")
    db = tmp_path / "m.db"
    ran = CliRunner().invoke(main, ["run", "workload", "--apptainer", str(sif), "--out", str(out), "--db", str(db)])
    assert ran.exit_code == 0, ran.output
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "pass"
    assert result["image"]["environment"] == "apptainer"
    assert result["image"]["sif"]["sha256"] == json.loads(sif.with_name("cpu.sif.json").read_text())["sha256"]
    log = (out / "container.log").read_text()
    assert "--cleanenv" not in log and "[workload] pass" in log
    [cell] = json.loads(CliRunner().invoke(main, ["matrix", "list", "--json", "--db", str(db)]).stdout)
    assert (cell["key"], cell["status"], cell["runs"], cell["attempts"]) == (CELL, "pass", 1, 0)


def test_a_changed_sif_is_refused_before_anything_runs(cpu_sif, tmp_path):
    sif, _ = cpu_sif
    copy = tmp_path / "changed.sif"
    copy.write_bytes(sif.read_bytes()[:4096])
    copy.with_name("changed.sif.json").write_text(sif.with_name("cpu.sif.json").read_text())
    ran = CliRunner().invoke(
        main,
        ["run", "workload", "--apptainer", str(copy), "--out", str(tmp_path / "o"), "--db", str(tmp_path / "m.db")],
    )
    assert ran.exit_code == 2 and "sha256 differs" in ran.output
    assert not (tmp_path / "m.db").exists() and not (tmp_path / "o").exists()


def _wait_finished(job_id: str, tasks: int, seconds: int = 400) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["sacct", "-j", job_id, "-X", "-n", "-P", "--format=JobID,State"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        states = [line.split("|")[1] for line in out.splitlines() if "_" in line.split("|")[0] and "[" not in line]
        if len(states) == tasks and not any(s in ("PENDING", "RUNNING", "COMPLETING") for s in states):
            return out
        time.sleep(5)
    raise AssertionError(f"job {job_id} did not finish in {seconds} s: {out}")


def test_slurm_array_collects_a_pass_a_fail_and_a_timeout_attempt(cpu_sif, shared_dir, tmp_path):
    sif, _ = cpu_sif
    results = _open_to_job_user(shared_dir / "results")
    db = tmp_path / "m.db"
    args = ["slurm", "submit", "--sif", str(sif), "--time", "1", "--results-dir", str(results), "--db", str(db)]
    for name, value in CONFIGS.items():
        args += ["--config", f"{name}={value}"]
    submitted = CliRunner().invoke(main, args)
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.strip()
    [script] = list((tmp_path / "envbuild-attempts").glob("*-slurm-*/job.sbatch"))
    assert "#SBATCH --array=0-2" in script.read_text() and "#SBATCH --time=1" in script.read_text()
    sacct = _wait_finished(job_id, 3)

    collected = CliRunner().invoke(main, ["slurm", "collect", job_id, "--db", str(db)], terminal_width=200)
    assert collected.exit_code == 1, collected.output  # one task did not pass
    with MatrixStore.open(db, readonly=True) as store:
        runs = store.runs()
    seen = sorted(
        (
            r["result"]["host"]["slurm"]["config"],
            r["result"]["host"]["slurm"]["state"],
            r["result"]["status"],
            r["result"].get("error_class"),
            bool(r["counts"]),
        )
        for r in runs
    )
    assert seen == [
        ("long", "TIMEOUT", "error", "slurm_timeout", False),
        ("quick", "COMPLETED", "pass", None, True),
        ("strict", "FAILED", "fail", "did_not_learn", True),
    ], (sacct, collected.output)
    assert "--resubmit" in collected.output  # the timed-out task is offered again
    assert all(r["result"]["image"]["environment"] == "apptainer" for r in runs)

    again = CliRunner().invoke(main, ["slurm", "collect", job_id, "--db", str(db)])
    assert again.exit_code == 1, again.output
    with MatrixStore.open(db, readonly=True) as store:
        assert len(store.runs()) == 3  # collecting twice records nothing new

    [cell] = json.loads(CliRunner().invoke(main, ["matrix", "list", "--json", "--db", str(db)]).stdout)
    # quick and strict shorten the smoke preset (--max-steps): measurements labelled with their overrides, never the
    # cell's verdict (docs/matrix.md "Verdict runs and measurements"); the timed-out task is an attempt
    assert (cell["key"], cell["status"], cell["runs"], cell["attempts"]) == (CELL, "untested", 0, 1)
    assert sorted((m["configuration"], m["runs"]) for m in cell["measurements"]) == [
        ("smoke · tiny-gemma · max_steps=2 · min_accuracy=0.0 · no probes", 1),
        ("smoke · tiny-gemma · max_steps=2 · min_accuracy=0.99 · no probes", 1),
    ]
    site = tmp_path / "site"
    report = CliRunner().invoke(main, ["report", "-o", str(site), "--db", str(db)])
    assert report.exit_code == 0, report.output
    pages = " ".join(p.read_text() for p in site.rglob("*.html"))
    assert "did_not_learn" in pages and "slurm_timeout" in pages
