"""The conditions of a measurement (builder/engine/conditions.py): recorded in result.json by `envbuild run
workload`, validated by the import schema, and a run taken while another runs on the same matrix is marked
contended. Real `envbuild run workload --local` processes on a real SQLite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.engine import conditions
from builder.store.result_schema import ResultSchemaError, validate
from builder.store.store import MatrixStore
from matrix_fixtures import cpu_result

REPO = Path(__file__).resolve().parents[2]
ENVBUILD = [sys.executable, "-c", "from builder.cli import main; main()"]
SHORT = ["--max-steps", "6", "--min-accuracy", "0", "--no-probes"]


def test_two_runs_at_once_are_both_marked_contended(tmp_path):
    db = tmp_path / "m.db"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = []
    for name in ("a", "b"):
        procs.append(
            subprocess.Popen(
                [*ENVBUILD, "run", "workload", "--local", "--out", str(tmp_path / name), "--db", str(db), *SHORT],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
        time.sleep(0.5)
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    for name, output in zip("ab", outputs):
        recorded = json.loads((tmp_path / name / "result.json").read_text())["conditions"]
        assert recorded["contended"] is True and recorded["other_envbuild_runs"] == 1, recorded
        assert "1 other envbuild run(s) were writing to this matrix meanwhile" in recorded["contention"]
        assert recorded["cpu_count"] == os.cpu_count() and set(recorded["load_average"]) == {"start", "end"}
        assert "contended: " in output
    with MatrixStore.open(db, readonly=True) as store:
        stored = [r["result"]["conditions"] for r in store.runs()]
    assert len(stored) == 2 and all(c["contended"] for c in stored)  # through the import schema, as recorded
    # a third run alone afterwards sees no other envbuild run (the others' markers say they finished)
    alone = subprocess.run(
        [*ENVBUILD, "run", "workload", "--local", "--out", str(tmp_path / "c"), "--db", str(db), *SHORT],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert alone.returncode == 0, alone.stderr
    assert json.loads((tmp_path / "c" / "result.json").read_text())["conditions"]["other_envbuild_runs"] == 0
    assert not (tmp_path / "m.db.in-flight").exists()  # nothing is left once no run is going


def test_what_makes_a_measurement_contended():
    quiet = {"tool": "nvidia-smi", "other_processes": []}
    assert conditions.judge(0.2, 1.5, 16, quiet, quiet, 0) == []
    busy = {"tool": "nvidia-smi", "other_processes": [{"pid": 4242, "name": "python3"}]}
    assert conditions.judge(0.2, 1.5, 16, busy, quiet, 0) == ["1 other process(es) on the GPUs"]
    assert conditions.judge(9.0, 1.5, 16, None, None, None) == ["load average 9.0 at the start on 16 CPUs"]
    # our own run keeps the CPUs busy: the end's load may reach about the CPU count without counting as contention
    assert conditions.judge(0.2, 2.9, 2, None, None, None) == []
    assert conditions.judge(0.2, 4.5, 2, None, None, 2) == [
        "2 other envbuild run(s) were writing to this matrix meanwhile",
        "load average 4.5 at the end on 2 CPUs",
    ]


@pytest.mark.parametrize(
    "files, limit",
    [
        ({"cpu.max": "200000 100000\n"}, 2.0),
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 0.5),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({}, None),
    ],
)
def test_cgroup_cpu_limit(tmp_path, files, limit):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert conditions.cgroup_cpu_limit(tmp_path) == limit


def test_conditions_go_through_the_import_schema():
    good = {
        "load_average": {"start": 0.3, "end": 1.2},
        "cpu_count": 16,
        "cgroup_cpu_limit": None,
        "gpu": {"tool": "nvidia-smi", "other_processes": [], "sm_clock_mhz": 1980.0, "power_limit_w": 700.0},
        "other_envbuild_runs": 0,
        "contended": False,
        "contention": [],
    }
    result = cpu_result(conditions=good)
    assert validate(result)["conditions"] == good
    for bad, field in (
        ({**good, "contended": "no"}, "conditions.contended"),
        ({**good, "cpu_count": -1}, "conditions.cpu_count"),
        ({**good, "load_average": {"start": float("nan")}}, "conditions.load_average"),
        ({k: v for k, v in good.items() if k != "contended"}, "conditions.contended"),
    ):
        with pytest.raises(ResultSchemaError) as err:
            validate(cpu_result(conditions=bad))
        assert field in str(err.value), err.value


def test_the_in_flight_folder_goes_with_the_last_run(tmp_path):
    """A run alone leaves no `<db>.in-flight/` behind; a finished run's marker stays while a run that overlapped it
    still runs (that run counts it when it finishes), and the folder goes with the last one."""
    db = tmp_path / "m.db"
    folder = tmp_path / "m.db.in-flight"
    alone = conditions.Watch.start(db)
    assert alone.marker is not None and alone.marker.is_file()
    assert alone.finish()["other_envbuild_runs"] == 0
    assert not folder.exists()
    first, second = conditions.Watch.start(db), conditions.Watch.start(db)
    assert second.others_at_start == 1
    assert second.finish()["other_envbuild_runs"] == 1
    assert len(list(folder.glob("*.json"))) == 2  # the first still runs: it must still see the second
    assert first.finish()["other_envbuild_runs"] == 1
    assert not folder.exists()
