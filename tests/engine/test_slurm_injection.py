"""Shell injection into job.sbatch: the script `slurm submit --dry-run` prints is run with
bash here, with a recording stand-in for `apptainer` and `module` on PATH (the test is about the shell, not
Apptainer), and no injected command may run. Hostile values come from the SIF record (data that travels with a
SIF), the site file, --config and --module; hypothesis drives workload arguments through the script and checks
that apptainer receives each one exactly as given."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from builder.cli import main
from builder.engine.slurm import Site, plan, render_script
from builder.plan.cells import Cell

CELL = {"flavor": "cpu", "torch": "2.13", "python": "3.11", "accel_version": None, "arch": None}
RECORDER = """#!/bin/bash
printf '%s\\0' "$@" > "$RECORD_DIR/$(basename "$0").argv"
"""


def make_sif(folder: Path, cell_key: str | None = None, cell: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    sif = folder / "cell.sif"
    sif.write_bytes(b"not a real SIF, never executed here")
    manifest = {"cell_key": cell_key or Cell(**CELL).key, "flavor": "cpu", "cell": cell or CELL}
    sif.with_name("cell.sif.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "sif": sif.name,
                "sha256": hashlib.sha256(sif.read_bytes()).hexdigest(),
                "image": {"tag": "envbuild/cpu:x", "id": "sha256:0", "digest": "sha256:0", "manifest": manifest},
                "verify": {"ok": True},
            }
        )
    )
    return sif


def submit(tmp_path: Path, sif: Path, *extra: str, results: Path | None = None):
    results = results or tmp_path / "results"
    results.mkdir(exist_ok=True)
    return CliRunner().invoke(
        main,
        [
            "slurm",
            "submit",
            "--sif",
            str(sif),
            "--db",
            str(tmp_path / "m.db"),
            "--site-file",
            str(tmp_path / "none.toml"),
            "--results-dir",
            str(results),
            "--dry-run",
            *extra,
        ],
    )


def run_script(script: str, where: Path) -> dict[str, list[str]]:
    """Run the sbatch script with bash as task 0; {stand-in name: the argv it received}."""
    bin_dir, record = where / "bin", where / "record"
    bin_dir.mkdir(parents=True, exist_ok=True)
    record.mkdir(exist_ok=True)
    for name in ("apptainer", "module"):
        (bin_dir / name).write_text(RECORDER)
        (bin_dir / name).chmod(0o755)
    (where / "job.sbatch").write_text(script)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SLURM_ARRAY_TASK_ID": "0",
        "RECORD_DIR": str(record),
        "HOME": str(where),
    }
    subprocess.run(["bash", str(where / "job.sbatch")], cwd=where, env=env, capture_output=True, timeout=60)
    return {p.stem: p.read_bytes().decode().split("\0")[:-1] for p in record.glob("*.argv")}


def test_the_script_runs_under_bash_and_hands_apptainer_its_arguments(tmp_path):
    """The positive control: the stand-in does receive the task's command line."""
    out = submit(tmp_path, make_sif(tmp_path / "sif"), "--config", "a=--max-steps 4", "--module", "LUMI/24.03")
    assert out.exit_code == 0, out.output
    calls = run_script(out.stdout, tmp_path / "run")
    assert calls["module"] == ["load", "LUMI/24.03"]
    argv = calls["apptainer"]
    assert argv[:3] == ["exec", "--cleanenv", "--containall"] and argv[-2:] == ["--max-steps", "4"]
    bind = argv[argv.index("--bind") + 1]
    assert bind.endswith(":/out") and Path(bind[:-5]).is_dir() and str(tmp_path / "results") in bind


def test_a_newline_in_the_sif_records_cell_key_is_refused(tmp_path):
    pwned = tmp_path / "PWNED"
    sif = make_sif(tmp_path / "sif", cell_key=f"cpu-torch2.13-py3.11\ntouch {pwned}\n#")
    out = submit(tmp_path, sif)
    assert out.exit_code == 2 and "its record names no valid cell" in out.output, out.output
    assert not pwned.exists()


@pytest.mark.parametrize(
    "key",
    [
        "cpu-torch2.13-py3.11/../../../etc",
        "../cpu-torch2.13-py3.11",
        "cpu-torch2.13-py3.11 x",
        "cpu-torch2.13-py3.11'",
        "cpu-torch2.13-py$(id)",
    ],
)
def test_a_cell_key_that_is_not_one_is_refused(tmp_path, key):
    out = submit(tmp_path, make_sif(tmp_path / "sif", cell_key=key))
    assert out.exit_code == 2 and "names no valid cell" in out.output


def test_a_cell_key_that_names_other_coordinates_than_the_record_is_refused(tmp_path):
    out = submit(tmp_path, make_sif(tmp_path / "sif", cell_key="cpu-torch2.12-py3.11"))
    assert out.exit_code == 2 and "is not the cell its coordinates name" in out.output


@pytest.mark.parametrize(
    "results_dir",
    ["x\ntouch PWNED", "/tmp/a b", "/tmp/a,/root", "/tmp/a:/root", "/tmp/$(id)", "/tmp/a'b", "/tmp/a/../../etc"],
)
def test_a_results_dir_that_would_change_the_script_is_refused_from_the_site_file(tmp_path, results_dir):
    pwned = tmp_path / "PWNED"
    site = tmp_path / "site.toml"
    site.write_text("[slurm]\nresults_dir = " + json.dumps(results_dir.replace("PWNED", str(pwned))) + "\n")
    out = CliRunner().invoke(
        main,
        [
            "slurm",
            "submit",
            "--sif",
            str(make_sif(tmp_path / "sif")),
            "--db",
            str(tmp_path / "m.db"),
            "--site-file",
            str(site),
            "--dry-run",
        ],
    )
    assert out.exit_code == 2 and "site setting results_dir" in out.output, out.output
    assert not pwned.exists()


@pytest.mark.parametrize(
    "key, value",
    [
        ("partition", '"a\\n#SBATCH --uid=0"'),
        ("account", '"a;id"'),
        ("time", '"1 $(id)"'),
        ("gpus", '"1`id`"'),
        ("gres", '"gpu:1\\nid"'),
        ("mem", '"16G\'"'),
        ("cpus_per_task", '"4; id"'),
        ("modules", '["rocm $(id)"]'),
        ("modules", '"rocm"'),
        ("results_dir", '"/tmp/a\\nb"'),
        ("unknown_key", '"x"'),
        ("partition", "5"),
    ],
)
def test_every_site_value_is_checked(tmp_path, key, value):
    """docs/hpc.md: every value of the site file's [slurm] table is checked before a script is written."""
    site = tmp_path / "site.toml"
    site.write_text(f"[slurm]\n{key} = {value}\n")
    out = CliRunner().invoke(
        main,
        [
            "slurm",
            "submit",
            "--sif",
            str(make_sif(tmp_path / "sif")),
            "--db",
            str(tmp_path / "m.db"),
            "--site-file",
            str(site),
            "--results-dir",
            str(tmp_path),
            "--dry-run",
        ],
    )
    assert out.exit_code == 2 and "site setting" in out.output, out.output
    assert set(Site.model_fields) == {
        "partition",
        "account",
        "time",
        "gpus",
        "gres",
        "cpus_per_task",
        "mem",
        "modules",
        "results_dir",
    }  # a new field needs its row above


def test_a_config_argument_starting_with_the_out_variable_stays_one_quoted_word(tmp_path):
    pwned = tmp_path / "PWNED"
    value = f"""a='"$out"$(touch {pwned})' '"$out":/out'"""
    out = submit(tmp_path, make_sif(tmp_path / "sif"), "--config", value)
    assert out.exit_code == 0, out.output
    argv = run_script(out.stdout, tmp_path / "run")["apptainer"]
    assert not pwned.exists()
    assert argv[-2:] == [f'"$out"$(touch {pwned})', '"$out":/out']


WORDS = st.one_of(
    st.sampled_from(
        [
            "$(touch PWNED)",
            "`touch PWNED`",
            '"$out"',
            '"$out":/out',
            "'",
            '"',
            "\n",
            "a,b",
            "../../x",
            ";touch PWNED",
            "$out",
            "${out}",
            "\\",
            "*",
            "-",
            "--out2",
        ]
    ),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(WORDS, max_size=5))
def test_no_workload_argument_reaches_the_shell_unquoted(tmp_path_factory, args):
    where = tmp_path_factory.mktemp("prop")
    sif = make_sif(where / "sif")
    sub = plan("0123456789ab", [sif], {"a": args}, Site(results_dir=where / "results"), "2026-12-04T00:00:00Z")
    calls = run_script(render_script(sub).replace("PWNED", str(where / "PWNED")), where / "run")
    assert not (where / "PWNED").exists() and not (where / "run" / "PWNED").exists()
    assert calls["apptainer"][-len(args) - 2 :] == [
        "--out",
        "/out",
        *[a.replace("PWNED", str(where / "PWNED")) for a in args],
    ]
    assert os.path.isdir(calls["apptainer"][calls["apptainer"].index("--bind") + 1][: -len(":/out")])
