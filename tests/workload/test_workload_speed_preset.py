"""The `speed` preset (docs/workload.md "The speed preset"): a random-weight shape on synthetic learnable data,
untimed steps first, nothing downloaded; on the CPU with the tiny shape (real training steps)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workload.data.synthetic import class_tokens, fingerprint, synthetic_data
from workload.runner import LONG_RUN_S, Progress, duration
from workload.training.presets import PRESETS, preset_for

REPO = Path(__file__).resolve().parents[2]


def workload(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workload", "train", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )


def test_the_tiny_shape_trains_its_timed_steps_and_the_report_shows_the_speed(tmp_path):
    """`envbuild run workload --local --preset speed` end to end: the run, its record, the cell's step 6."""
    out, db, site = tmp_path / "out", tmp_path / "m.db", tmp_path / "site"
    ran = subprocess.run(
        [
            sys.executable,
            "-c",
            "from builder.cli import main; main()",
            "run",
            "workload",
            "--local",
            "--preset",
            "speed",
            "--model",
            "tiny-shape",
            "--no-probes",
            "--min-accuracy",
            "0",
            "--out",
            str(out),
            "--db",
            str(db),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )
    assert ran.returncode == 0, ran.stderr
    result = json.loads((out / "result.json").read_text())
    metrics, recipe = result["metrics"], preset_for("speed", "tiny-shape")
    assert (metrics["steps"], metrics["untimed_steps"]) == (recipe.max_steps, recipe.untimed_steps) == (12, 2)
    assert metrics["samples_per_s"] > 0 and metrics["tokens_per_s"] > metrics["samples_per_s"]
    assert len(metrics["curves"]["train_loss"]) == 12 and metrics["eval_after"]["accuracy"] >= 0
    assert result["model"]["random_weights"] is True and result["model"]["id"] == "tiny-shape"
    assert result["dataset"]["path"] == "synthetic" and result["dataset"]["n_eval"] == 512
    assert result["invocation"]["data"] == {
        "name": "synthetic",
        "bundled": False,
        "sha256": result["dataset"]["sha256"],
    }
    assert result["invocation"]["overrides"] == {"min_accuracy": 0.0}  # the tiny shape's own steps are no override
    assert result["conditions"]["contended"] in (True, False)  # recorded; this shared CPU may well be contended
    log = (out / "workload.log").read_text()  # the workload's progress, shown on the terminal as it runs
    assert "ETA" in log and "untimed" in log and "ETA" in ran.stdout
    report = subprocess.run(
        [
            sys.executable,
            "-c",
            "from builder.cli import main; main()",
            "report",
            "-o",
            str(site),
            "--db",
            str(db),
            "--no-recipes",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert report.returncode == 0, report.stderr
    page = (site / "cells" / "cpu-torch2.13-py3.11.html").read_text()
    speed = page.split('id="speed-table"', 1)[1].split("</table>", 1)[0]
    assert f"{metrics['samples_per_s']:,.1f}" in speed and "tiny-shape" in speed
    assert 'data-step="6" data-state="done"' in page


@pytest.mark.parametrize(
    "args, message",
    [
        (("--preset", "speed", "--model", "google/gemma-2b"), "the speed preset trains a random-weight shape"),
        (("--preset", "smoke", "--model", "gemma-2b-shape"), "trains with --preset speed only"),
        (("--preset", "speed", "--untimed-steps", "-1"), "--untimed-steps -1"),
    ],
)
def test_a_shape_and_the_speed_preset_go_together(tmp_path, args, message):
    done = workload(*args, "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "out" / "result.json").exists()


def test_the_speed_preset_is_the_throughput_levers_with_timed_steps():
    speed, throughput = PRESETS["speed"], PRESETS["throughput"]
    assert (speed.model, speed.max_steps, speed.untimed_steps, speed.seed) == ("gemma-2b-shape", 50, 10, 0)
    for lever in (
        "tokens_per_step",
        "pack",
        "pack_length",
        "pack_samples",
        "micro_batch_tokens",
        "compile",
        "varlen_attention",
        "merged_qkv",
        "lr_scaling",
        "lora_r",
        "dtype",
    ):
        assert getattr(speed, lever) == getattr(throughput, lever), lever


def test_synthetic_data_is_fixed_by_its_seed_and_carries_its_label():
    ids, labels = synthetic_data(300, 1000, seed=1)
    again = synthetic_data(300, 1000, seed=1)
    assert (ids, labels) == again and fingerprint(ids, labels) == fingerprint(*again)
    assert fingerprint(ids, labels) != fingerprint(*synthetic_data(300, 1000, seed=2))
    marks = class_tokens(7)
    for row, label in zip(ids, labels):  # every sample holds one of its class's tokens, none of another class's
        planted = {t for t in row if t < 100} - {0, 1, 2}
        assert planted and planted <= set(marks[label])
    lengths = sorted(len(r) for r in ids)
    assert 8 <= lengths[0] and lengths[-1] <= 512 and 35 <= lengths[len(lengths) // 2] <= 65


def test_a_long_run_says_so_once_the_pace_is_known(capsys):
    times = iter([0.0, 10.0, 20.0])
    progress = Progress(quiet=False, clock=lambda: next(times))
    progress(10, 10_000_000, 1.9)
    progress(20, 10_000_000, 1.8)  # 1 s per step: ~116 days left
    progress(30, 10_000_000, 1.7)
    err = capsys.readouterr().err
    assert err.count("note: this run will take about") == 1 and "--max-steps N shortens it" in err
    assert f"ETA {duration(9_999_980)}" in err and duration(9_999_980) == "115d 17h"
    assert duration(LONG_RUN_S - 1) == "2h 59m" and duration(125) == "2m 05s"
    short = Progress(quiet=False, clock=iter([0.0, 1.0]).__next__)
    short(10, 40, 1.0)
    short(20, 40, 1.0)
    assert "note:" not in capsys.readouterr().err
