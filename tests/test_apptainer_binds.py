"""Apptainer bind injection (issue 34, Medium 6): `--bind SRC:DST[:OPTS][,SRC...]` is a small language, so a
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
from test_slurm_injection import make_sif


def run_sif(tmp_path: Path, *args: str):
    return CliRunner().invoke(main, ["run", "workload", "--apptainer", str(make_sif(tmp_path / "sif")),
                                     "--no-record", *args])


@pytest.mark.parametrize("name", ["o,/root", "o:/etc", "o\nx", "o:ro"])
def test_an_out_dir_with_bind_syntax_is_refused_naming_the_option(tmp_path, name):
    out = tmp_path / name
    ran = run_sif(tmp_path, "--out", str(out))
    assert ran.exit_code == 2, ran.output
    assert "--out" in ran.output and "cannot be bound into the container" in ran.output
    assert not out.exists()


@pytest.mark.parametrize("option, name", [("--data", "d,/root"), ("--data", "d:/etc"), ("--model", "m,/root"),
                                          ("--model", "m:rw")])
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
