"""Hostile data stays bounded: a 50 MB row is cut at read time and the run's peak memory stays under 1 GiB."""

from __future__ import annotations

import json
import random
import subprocess
import sys

ROW_BYTES = 50_000_000
MEMORY_BOUND_KB = 1024 * 1024  # 1 GiB peak RSS for the whole smoke run (measured: ~0.45 GB with or without the row)
_RSS_OF_CHILD = (
    "import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)"
)


def _rows():
    return [{"text": f"{label} text number {i}", "label": label} for label in ("joy", "anger") for i in range(20)]


def test_a_50_mb_row_is_cut_at_read_time_and_memory_stays_bounded(tmp_path):
    rng = random.Random(0)
    data = tmp_path / "hostile.jsonl"
    with data.open("w") as f:
        rows = _rows()
        for row in rows[:10]:
            f.write(json.dumps(row) + "\n")
        chunk = "".join(rng.choice("abcdefgh ") for _ in range(1000))
        f.write(json.dumps({"text": chunk * (ROW_BYTES // 1000), "label": "joy"}) + "\n")
        for row in rows[10:]:
            f.write(json.dumps(row) + "\n")
    assert data.stat().st_size > ROW_BYTES
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _RSS_OF_CHILD,
            sys.executable,
            "-m",
            "workload",
            "train",
            "--data",
            str(data),
            "--labels",
            "auto",
            "--out",
            str(out),
            "--max-steps",
            "2",
            "--no-probes",
            "--min-accuracy",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    peak_kb = int(proc.stdout.split()[-1])
    assert peak_kb < MEMORY_BOUND_KB, f"peak RSS {peak_kb / 1024:.0f} MB"
    assert "1 text(s) longer than 1024 characters were cut to that length when read" in proc.stderr
    assert "1 text(s) longer than max_length 64 tokens were truncated" in proc.stderr
    dataset = json.loads((out / "result.json").read_text())["dataset"]
    assert dataset["truncated_chars"] == 1 and dataset["truncated_tokens"] == 1


def test_long_tokenization_shows_progress(tmp_path):
    data = tmp_path / "many.jsonl"
    data.write_text(
        "".join(
            json.dumps({"text": f"{label} row {i}", "label": label}) + "\n"
            for label in ("joy", "anger")
            for i in range(400)
        )
    )
    every_line = (
        "import sys, workload.runner as r; r.PROGRESS_EVERY_S = 0; from workload.cli import main; sys.exit(main())"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            every_line,  # a progress line after every chunk, however fast it tokenizes
            "train",
            "--data",
            str(data),
            "--labels",
            "auto",
            "--out",
            str(tmp_path / "out"),
            "--max-steps",
            "1",
            "--no-probes",
            "--min-accuracy",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tokenizing the training texts: 512/640" in proc.stderr
    assert "tokenizing the training texts: 640/640" in proc.stderr
