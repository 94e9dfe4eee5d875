"""Slurm and Apptainer without a cluster: sacct parsing and the end-state rules, the sbatch script, site
settings at the door, and a missing `apptainer` (an attempt, never a verdict). tests/integration/test_hpc.py runs the
same paths on a real one-node Slurm."""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.engine.slurm import TaskState, end_class, parse_sacct
from builder.store.store import MatrixStore
from builder.store.verdict_rules import counts
from builder.plan.cells import Cell

# `sacct -j 1 -X -n -P --format=JobID,State,ExitCode,Start,End,NodeList` on .ci/hpc_cluster.sh's cluster,
# plus a pending range and a cancelled task as Slurm prints them
SACCT = """1_0|COMPLETED|0:0|2026-12-03T09:41:47|2026-12-03T09:42:22|hpc-node0
1_1|FAILED|1:0|2026-12-03T09:41:47|2026-12-03T09:42:19|hpc-node0
1_2|TIMEOUT|0:0|2026-12-03T09:41:47|2026-12-03T09:43:09|hpc-node0
1_3|CANCELLED by 2300|0:15|2026-12-03T09:41:47|2026-12-03T09:41:50|hpc-node0
1_[4-5]|PENDING|0:0|Unknown|Unknown|None assigned
"""


def test_sacct_lines_become_task_states():
    states = parse_sacct(SACCT, "1")
    assert sorted(states) == [0, 1, 2, 3]  # the pending range is not a task yet
    assert [states[i].state for i in range(4)] == ["COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"]
    assert states[2].start == "2026-12-03T09:41:47Z" and states[2].end == "2026-12-03T09:43:09Z"
    assert states[1].exit_code == "1:0" and states[0].node == "hpc-node0"


@pytest.mark.parametrize(
    "state, exit_code, log, expected, verdict",
    [
        ("COMPLETED", "0:0", "", None, None),
        ("FAILED", "1:0", "", "container_died", True),
        ("FAILED", "2:0", "[workload] bad input: --data x: no such file\n", "usage_error", False),
        ("OUT_OF_MEMORY", "0:125", "", "oom_killed", True),
        ("TIMEOUT", "0:0", "", "slurm_timeout", False),
        ("NODE_FAIL", "0:0", "", "slurm_node_fail", False),
        ("PREEMPTED", "0:0", "", "slurm_preempted", False),
        ("CANCELLED", "0:15", "", "slurm_cancelled", False),
        ("BOOT_FAIL", "0:0", "", "slurm_node_fail", False),
        ("SOMETHING_NEW", "0:0", "", "slurm_lost", False),
    ],
)
def test_end_states_map_to_the_written_rules(state, exit_code, log, expected, verdict):
    error_class, _ = end_class(
        TaskState(index=0, state=state, exit_code=exit_code, start=None, end=None, node=None), log
    )
    assert error_class == expected
    if expected is not None:
        assert counts("run", "error", error_class) is verdict


def test_garbage_from_sacct_is_refused():
    from builder.engine.slurm import SlurmError

    with pytest.raises(SlurmError):
        parse_sacct("1_0|COMPLETED\n", "1")
    with pytest.raises(SlurmError):
        parse_sacct("1_0|<script>|0:0|x|y|n\n", "1")


def _fake_sif(tmp_path: Path, flavor: str = "cpu") -> Path:
    """A file with the sidecar `envbuild sif` writes (its sha256 true): enough for everything before apptainer."""
    sif = tmp_path / "cell.sif"
    sif.write_bytes(b"not a real SIF, never executed here")
    cell = {
        "flavor": flavor,
        "torch": "2.13",
        "python": "3.11",
        "accel_version": None if flavor == "cpu" else "6.4",
        "arch": None if flavor == "cpu" else "gfx90a",
    }
    manifest = {"cell_key": Cell(**cell).key, "flavor": flavor, "cell": cell}
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


def test_dry_run_prints_a_readable_script_and_writes_nothing(tmp_path):
    sif = _fake_sif(tmp_path)
    site = tmp_path / "site.toml"
    site.write_text('[slurm]\npartition = "small-g"\naccount = "project_465000001"\nmodules = ["LUMI/24.03"]\n')
    before = sorted(tmp_path.rglob("*"))
    out = CliRunner().invoke(
        main,
        [
            "slurm",
            "submit",
            "--sif",
            str(sif),
            "--config",
            "a=--max-steps 4",
            "--config",
            "b=--seed 7",
            "--time",
            "00:20:00",
            "--site-file",
            str(site),
            "--results-dir",
            str(tmp_path),
            "--db",
            str(tmp_path / "m.db"),
            "--dry-run",
        ],
    )
    assert out.exit_code == 0, out.output
    script = out.stdout
    for line in (
        "#SBATCH --array=0-1",
        "#SBATCH --time=00:20:00",
        "#SBATCH --partition=small-g",
        "#SBATCH --account=project_465000001",
        "module load LUMI/24.03",
        "  0)  # cpu-torch2.13-py3.11 / a",
        "  1)  # cpu-torch2.13-py3.11 / b",
        "--cleanenv --containall",
    ):
        assert line in script, line
    assert "--max-steps 4" in script and "--seed 7" in script and "--rocm" not in script
    assert sorted(tmp_path.rglob("*")) == before


def test_a_rocm_sif_gets_rocm_in_the_script(tmp_path):
    out = CliRunner().invoke(
        main,
        [
            "slurm",
            "submit",
            "--sif",
            str(_fake_sif(tmp_path, "rocm")),
            "--results-dir",
            str(tmp_path),
            "--db",
            str(tmp_path / "m.db"),
            "--dry-run",
        ],
    )
    assert out.exit_code == 0, out.output
    assert "--containall --pwd /tmp --rocm" in out.stdout


@pytest.mark.parametrize(
    "option",
    [
        ["--partition", "debug\n#SBATCH --uid=0"],
        ["--time", "1; rm -rf ~"],
        ["--module", "rocm $(id)"],
        ["--config", "Bad Name=--seed 1"],
        ["--config", "a=--out /elsewhere"],
    ],
)
def test_values_that_would_change_the_script_are_bad_input(tmp_path, option):
    out = CliRunner().invoke(
        main,
        [
            "slurm",
            "submit",
            "--sif",
            str(_fake_sif(tmp_path)),
            "--results-dir",
            str(tmp_path),
            "--db",
            str(tmp_path / "m.db"),
            *option,
        ],
    )
    assert out.exit_code == 2, out.output
    assert not (tmp_path / "envbuild-attempts").exists() and not (tmp_path / "m.db").exists()


def test_collect_of_an_unknown_job_is_bad_input(tmp_path):
    out = CliRunner().invoke(main, ["slurm", "collect", "12345", "--db", str(tmp_path / "m.db")])
    assert out.exit_code == 2 and "no submission of job 12345" in out.output


def test_missing_apptainer_is_an_attempt_never_a_verdict(tmp_path, monkeypatch):
    monkeypatch.delenv("ENVBUILD_APPTAINER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    out_dir, db = tmp_path / "run", tmp_path / "m.db"
    ran = CliRunner().invoke(
        main, ["run", "workload", "--apptainer", str(_fake_sif(tmp_path)), "--out", str(out_dir), "--db", str(db)]
    )
    assert ran.exit_code == 1, ran.output
    assert "apptainer is not installed here" in ran.output
    result = json.loads((out_dir / "result.json").read_text())
    assert (result["status"], result["error_class"]) == ("error", "container_error")
    assert result["image"]["environment"] == "apptainer"
    with MatrixStore.open(db, readonly=True) as store:
        [run] = store.runs()
    assert not run["counts"]


def test_the_script_passes_each_workload_argument_as_one_word(tmp_path):
    """A configuration's argument with a space or shell characters reaches the workload as one argv element,
    and nothing in it runs: the `cmd=(...)` line of the dry-run script, read by a real bash."""
    evil = "my data; touch PWNED $(touch PWNED2).jsonl"
    out = CliRunner().invoke(
        main,
        [
            "slurm",
            "submit",
            "--sif",
            str(_fake_sif(tmp_path)),
            "--config",
            f"a=--data {shlex.quote(evil)} --labels auto",
            "--results-dir",
            str(tmp_path),
            "--db",
            str(tmp_path / "m.db"),
            "--dry-run",
        ],
    )
    assert out.exit_code == 0, out.output
    cmd = next(line.strip() for line in out.stdout.splitlines() if line.strip().startswith("cmd=("))
    shown = subprocess.run(
        ["bash", "-c", f'out=/o; {cmd.removesuffix(";;")}; printf "%s\\n" "${{cmd[@]}}"'],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert shown[-4:] == ["--data", evil, "--labels", "auto"], shown
    assert not list(tmp_path.glob("PWNED*"))
