"""Training settings are range-checked before any work (exit 2, no traceback, nothing written); the pass bar
beats the eval split's majority-class rate; a run records the command that made it; third-party chatter goes
to the run's third-party.log, not the terminal."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from workload.settings import RANGES
from workload.training.pass_bar import MARGIN, pass_bar

from workload_fixtures import quick_train

# option and value -> what the one-line message must say
BAD_SETTINGS = {
    ("--batch-size", "0"): "--batch-size 0: must be a whole number from 1 to 65536",
    ("--batch-size", "-4"): "--batch-size -4: must be a whole number from 1",
    ("--epochs", "0"): "--epochs 0: must be a whole number from 1",
    ("--max-steps", "0"): "--max-steps 0: must be a whole number from 1 to 10000000 (leave --max-steps out",
    ("--max-steps", "-1"): "--max-steps -1: must be a whole number from 1",
    ("--lr", "-1"): "--lr -1.0: must be a number above 0 and at most 10",
    ("--lr", "0"): "--lr 0.0: must be a number above 0",
    ("--lr", "nan"): "--lr nan: must be a number above 0",
    ("--lr", "inf"): "--lr inf: must be a number above 0",
    ("--max-length", "0"): "--max-length 0: must be a whole number from 8 to 131072",
    ("--warmup-steps", "-1"): "--warmup-steps -1: must be a whole number from 0",
    ("--untimed-steps", "-1"): "--untimed-steps -1: must be a whole number from 0 to 10000000",
    ("--lora-r", "0"): "--lora-r 0: must be a whole number from 1 to 4096",
    ("--lora-dropout", "1"): "--lora-dropout 1.0: must be at least 0 and below 1",
    ("--lora-dropout", "-0.1"): "--lora-dropout -0.1: must be at least 0 and below 1",
    ("--pad-multiple", "0"): "--pad-multiple 0: must be a whole number from 1",
    ("--seed", "-1"): "--seed -1: must be a whole number from 0 to 4294967295",
    ("--min-accuracy", "1.5"): "--min-accuracy 1.5: must be from 0 to 1",
    ("--attn", "fastest"): "--attn fastest: must be one of auto, eager, sdpa",
    ("--device", "gpu"): "--device gpu: must be auto, cpu, cuda or cuda:N",
    ("--device", "cpu0"): "--device cpu0: must be auto, cpu, cuda or cuda:N",  # a prefix of an allowed name
    ("--device", "autoxyz"): "--device autoxyz: must be auto, cpu, cuda or cuda:N",
    ("--device", "cpu --x"): "--device cpu --x: must be auto, cpu, cuda or cuda:N",
    ("--device", "cuda:1x"): "--device cuda:1x: must be auto, cpu, cuda or cuda:N",
    ("--device", "cuda:1234"): "--device cuda:1234: must be auto, cpu, cuda or cuda:N",
}


def _workload(*args, cwd=None, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "workload", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout
    )


@pytest.mark.parametrize("option,value", sorted(BAD_SETTINGS), ids=[" ".join(k) for k in sorted(BAD_SETTINGS)])
def test_a_setting_out_of_range_is_bad_input_before_any_work(tmp_path, option, value):
    proc = _workload("train", option, value, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("[workload] bad input: ")]
    assert len(lines) == 1 and BAD_SETTINGS[option, value] in lines[0], proc.stderr
    assert ("leave --max-steps out" in lines[0]) == (option == "--max-steps"), lines[0]  # the hint is its own
    assert list(tmp_path.iterdir()) == []  # not even the default run dir


# Just past the top of each range: refused, and the message names the whole range.
PAST_THE_TOP = {
    "--batch-size": ("65537", "from 1 to 65536"),
    "--epochs": ("10001", "from 1 to 10000"),
    "--max-steps": ("10000001", "from 1 to 10000000"),
    "--max-length": ("131073", "from 8 to 131072"),
    "--warmup-steps": ("10000001", "from 0 to 10000000"),
    "--untimed-steps": ("10000001", "from 0 to 10000000"),
    "--lora-r": ("4097", "from 1 to 4096"),
    "--pad-multiple": ("4097", "from 1 to 4096"),
    "--seed": ("4294967296", "from 0 to 4294967295"),
    "--lr": ("10.001", "above 0 and at most 10"),
    "--min-accuracy": ("-0.01", "must be from 0 to 1"),
    "--lora-dropout": ("1.5", "at least 0 and below 1"),
}


@pytest.mark.parametrize("option", sorted(PAST_THE_TOP))
def test_the_edges_past_each_range_are_refused_with_the_range(tmp_path, option):
    value, allowed = PAST_THE_TOP[option]
    proc = _workload("train", option, value, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"[workload] bad input: {option} " in proc.stderr and allowed in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


# The lowest and highest value of every setting at once: all allowed, so the first refusal is the device.
EDGES = {
    "lowest": [
        "--batch-size",
        "1",
        "--epochs",
        "1",
        "--max-steps",
        "1",
        "--max-length",
        "8",
        "--warmup-steps",
        "0",
        "--untimed-steps",
        "0",
        "--lora-r",
        "1",
        "--pad-multiple",
        "1",
        "--seed",
        "0",
        "--lr",
        "1e-12",
        "--lora-dropout",
        "0",
        "--min-accuracy",
        "0",
        "--attn",
        "auto",
    ],
    "highest": [
        "--batch-size",
        "65536",
        "--epochs",
        "10000",
        "--max-steps",
        "10000000",
        "--max-length",
        "131072",
        "--warmup-steps",
        "10000000",
        "--untimed-steps",
        "10000000",
        "--lora-r",
        "4096",
        "--pad-multiple",
        "4096",
        "--seed",
        "4294967295",
        "--lr",
        "10",
        "--lora-dropout",
        "0.999",
        "--min-accuracy",
        "1",
        "--attn",
        "flex_attention",
    ],
}


@pytest.mark.parametrize("edge", sorted(EDGES))
def test_the_edges_of_each_range_are_allowed(tmp_path, edge):
    proc = _workload("train", *EDGES[edge], "--device", "gpu0", cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "[workload] bad input: --device gpu0: must be auto, cpu, cuda or cuda:N" in proc.stderr, proc.stderr


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:0", "cuda:999"])
def test_every_device_form_is_allowed(tmp_path, device):
    """The device is allowed, so the next check speaks: an --out that cannot be made."""
    unusable = tmp_path / "file"
    unusable.write_text("not a directory")
    proc = _workload("train", "--device", device, "--out", str(unusable / "out"), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"[workload] bad input: --out {unusable / 'out'}: cannot write there" in proc.stderr, proc.stderr


def test_a_setting_the_command_line_cannot_give_is_refused_too():
    """A recipe built in Python (not from the command line) with a setting missing or a bool for a number."""
    import dataclasses

    from workload.settings import SettingError, check_recipe
    from workload.training.presets import PRESETS

    for name, (option, *_) in RANGES.items():
        for value in [True] if name == "max_steps" else [None, True]:
            with pytest.raises(SettingError, match=f"^{option} {value}: must be a whole number"):
                check_recipe(dataclasses.replace(PRESETS["smoke"], **{name: value}))
    for lr in ("0.01", None):  # a learning rate that is no number at all: the message, not a TypeError
        with pytest.raises(SettingError, match=f"^--lr {lr}: must be a number above 0"):
            check_recipe(dataclasses.replace(PRESETS["smoke"], learning_rate=lr))


@pytest.mark.parametrize("command", [["probe"], ["predict", "--adapter", "ADAPTER"]])
def test_a_device_typo_is_refused_by_probe_and_predict_too(tmp_path, command):
    args = [str(tmp_path) if a == "ADAPTER" else a for a in command]
    proc = _workload(*args, "--device", "cpu0", cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "[workload] bad input: --device cpu0: must be auto, cpu, cuda or cuda:N" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "labels,num_labels,expected",
    [
        ([0, 1] * 5, 2, 0.5 + MARGIN * 0.5),  # two balanced labels: 0.6, not 0.45
        (list(range(7)) * 10, 7, 1 / 7 + MARGIN * 6 / 7),  # seven balanced labels: 0.314
        ([0] * 9 + [1], 2, 0.9 + MARGIN * 0.1),  # a 90 % majority: 0.92
        ([0, 1, 2], 10, 1 / 3 + MARGIN * 2 / 3),  # the majority rate (1/3) is above chance (1/10)
    ],
)
def test_the_bar_beats_the_majority_rate_by_the_margin_for_any_number_of_labels(labels, num_labels, expected):
    bar = pass_bar(labels, num_labels)
    assert bar["min_accuracy"] == pytest.approx(expected, abs=1e-4) and bar["source"] == "majority rate + margin"
    assert bar["min_accuracy"] > bar["majority_rate"] >= bar["chance"] == pytest.approx(1 / num_labels, abs=1e-4)


def test_a_preset_floor_and_a_given_bar():
    assert pass_bar(list(range(7)) * 2, 7, floor=0.45) == {
        "min_accuracy": 0.45,
        "majority_rate": 0.1429,
        "chance": 0.1429,
        "margin": MARGIN,
        "source": "preset floor",
    }
    assert pass_bar([0, 1], 2, floor=0.45)["min_accuracy"] == 0.6  # the rule wins where it is higher
    assert pass_bar([0, 1], 2, floor=0.45, given=0.0)["min_accuracy"] == 0.0


def test_the_stored_bar_has_four_places_and_a_tie_with_the_floor_credits_the_rule():
    seven = pass_bar(list(range(7)) * 10, 7)
    assert (seven["min_accuracy"], seven["majority_rate"], seven["chance"]) == (0.3143, 0.1429, 0.1429)
    assert pass_bar([0, 1], 2, floor=0.6) == {
        "min_accuracy": 0.6,
        "majority_rate": 0.5,
        "chance": 0.5,
        "margin": 0.2,
        "source": "majority rate + margin",
    }


def test_an_empty_eval_split_sets_a_bar_no_run_can_pass():
    assert pass_bar([], 2) == {
        "min_accuracy": 1.0,
        "majority_rate": 1.0,
        "chance": 0.5,
        "margin": 0.2,
        "source": "majority rate + margin",
    }


def test_a_binary_dataset_that_cannot_be_learned_is_did_not_learn(tmp_path):
    """Every text the same, two balanced labels: any model scores exactly the majority rate (0.5). The old
    fixed bar of 0.45 recorded that as a pass."""
    data = tmp_path / "same.jsonl"
    data.write_text(
        "".join(json.dumps({"text": "the same words", "label": ["yes", "no"][i % 2]}) + "\n" for i in range(40))
    )
    proc = _workload(
        "train",
        "--data",
        str(data),
        "--labels",
        "auto",
        "--max-steps",
        "4",
        "--no-probes",
        "--quiet",
        "--out",
        str(tmp_path / "out"),
    )
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert proc.returncode == 1 and result["status"] == "fail" and result["error_class"] == "did_not_learn"
    assert result["metrics"]["eval_after"]["accuracy"] == 0.5
    assert result["config"]["pass_bar"]["min_accuracy"] == 0.6 == result["config"]["min_accuracy"]
    assert "below the pass bar 0.600" in result["error"] and "majority-class rate 0.500" in result["error"]


def test_a_run_with_no_optimizer_step_is_did_not_train_never_a_pass(tmp_path, monkeypatch):
    monkeypatch.setattr("workload.training.loop.plan_epoch", lambda *a, **k: [])
    code, result = quick_train(tmp_path, max_steps=None, min_accuracy=0.0)
    assert code == 1 and result["status"] == "error" and result["error_class"] == "did_not_train"
    assert result["metrics"]["steps"] == 0 and "eval_after" not in result["metrics"]


def test_a_run_records_its_command_data_and_overrides(tmp_path):
    data = tmp_path / "mine.jsonl"
    rows = [{"text": f"{word} text number {i}", "label": word} for word in ("up", "down") for i in range(10)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = [
        "train",
        "--data",
        str(data),
        "--labels",
        "auto",
        "--max-steps",
        "2",
        "--lr",
        "0.02",
        "--no-probes",
        "--min-accuracy",
        "0",
        "--out",
        str(tmp_path / "out"),
    ]
    proc = _workload(*argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    import hashlib

    assert result["invocation"] == {
        "argv": ["python", "-m", "workload", *argv],
        "preset": "smoke",
        "model": "tiny-gemma",
        "revision": None,
        "data": {"name": "mine.jsonl", "bundled": False, "sha256": hashlib.sha256(data.read_bytes()).hexdigest()},
        "overrides": {"labels": None, "max_steps": 2, "learning_rate": 0.02, "min_accuracy": 0.0},
        "probes": False,
    }
    assert result["dataset"]["sha256"] == result["invocation"]["data"]["sha256"]


def test_third_party_chatter_goes_to_the_log_not_the_terminal(tmp_path):
    proc = _workload("train", "--max-steps", "1", "--no-probes", "--min-accuracy", "0", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    terminal = proc.stdout + proc.stderr
    assert "Writing model shards" not in terminal and "Warning" not in terminal and "warnings.warn" not in terminal
    assert all(line.startswith("[workload] ") for line in terminal.splitlines()), terminal
    log = (tmp_path / "third-party.log").read_text()
    assert log.startswith("# third-party warnings")
    assert "FutureWarning" in log  # kept: transformers 5 warns about is_gradient_checkpointing on every run
