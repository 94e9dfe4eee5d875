"""Apptainer bind injection: `--bind SRC:DST[:OPTS][,SRC...]` is a small language, so a
path holding a comma, colon or newline would add binds (`--out "/x/o,/root"` binds /root too). Such a path is
bad input (exit 2, naming the option) before any directory is made or anything runs. No engine needed: the
refusal comes before Apptainer is looked for."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.engine.apptainer import bind_source
from builder.engine.container import RunError
from builder.plan.cells import Cell
from tests.engine.test_slurm_injection import make_sif


def run_sif(tmp_path: Path, *args: str):
    return CliRunner().invoke(
        main, ["run", "workload", "--apptainer", str(make_sif(tmp_path / "sif")), "--no-record", *args]
    )


@pytest.mark.parametrize("name", ["o,/root", "o:/etc", "o\nx", "o:ro"])
def test_an_out_dir_with_bind_syntax_is_refused_naming_the_option(tmp_path, name):
    out = tmp_path / name
    ran = run_sif(tmp_path, "--out", str(out))
    assert ran.exit_code == 2, ran.output
    assert "--out" in ran.output and "cannot be bound into the container" in ran.output
    assert not out.exists()


@pytest.mark.parametrize(
    "option, name", [("--data", "d,/root"), ("--data", "d:/etc"), ("--model", "m,/root"), ("--model", "m:rw")]
)
def test_a_data_or_model_path_with_bind_syntax_is_refused_naming_the_option(tmp_path, option, name):
    path = tmp_path / name
    path.mkdir(parents=True)
    ran = run_sif(tmp_path, option, str(path), "--out", str(tmp_path / "out"))
    assert ran.exit_code == 2, ran.output
    assert option in ran.output and "cannot be bound into the container" in ran.output
    assert not (tmp_path / "out").exists()


def test_a_plain_path_is_a_bind_source():
    assert bind_source(Path("/scratch/u/run-1"), "--out") == Path("/scratch/u/run-1")
    with pytest.raises(RunError, match="--data"):
        bind_source(Path("/scratch/a,b"), "--data")


ROCM = {"flavor": "rocm", "accel_version": "6.4", "torch": "2.13", "arch": "gfx90a", "python": "3.11"}


@pytest.mark.parametrize("gpus", ["0,LD_PRELOAD=/tmp/x.so", "0\n1", "$(id)", "0;1", "0,1"])
def test_a_gpus_value_that_is_not_indices_never_reaches_the_env_assignment(tmp_path, monkeypatch, gpus):
    """On a rocm SIF, --gpus becomes `--env ROCR_VISIBLE_DEVICES=...`: only 'all' or indices get there (the
    positive control, 0,1, gets past the check to the missing apptainer: an attempt, exit 1)."""
    monkeypatch.delenv("ENVBUILD_APPTAINER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    sif = make_sif(tmp_path / "sif", cell_key=Cell(**ROCM).key, cell=ROCM)
    ran = CliRunner().invoke(
        main,
        ["run", "workload", "--apptainer", str(sif), "--no-record", "--gpus", gpus, "--out", str(tmp_path / "out")],
    )
    if gpus == "0,1":
        assert ran.exit_code == 1 and "apptainer is not installed here" in ran.output, ran.output
    else:
        assert ran.exit_code == 2 and "use 'all' or comma-separated GPU indices" in ran.output, ran.output
