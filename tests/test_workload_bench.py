"""The throughput benchmark script runs end to end (tiny models on CPU; their speed numbers are not asserted)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_script_compares_both_loops(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "train_throughput.py"), "--tiny", "--steps", "4",
                           "--warmup", "0", "--variants", "", "--throughput-steps", "3", "--eval-samples", "16", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ratio (workload / baseline) samples/s" in proc.stdout
    report = json.loads(out.read_text())
    assert [r["name"] for r in report["runs"]] == ["hf_trainer_baseline", "workload_seed", "workload_throughput"]
    assert all(r["samples"] == 4 * 16 and r["samples_per_s"] > 0 for r in report["runs"][:2])
    throughput = report["runs"][2]
    assert throughput["steps"] == 3 and throughput["samples"] > 3 * 16 and throughput["levers"]["pack"]
    assert throughput["learning_rate"] > report["runs"][1]["learning_rate"]  # scaled with the step size
    assert report["summary"]["ratio_samples_per_s"] > 0
    assert report["header"]["lengths"]["median"] in range(35, 65)
