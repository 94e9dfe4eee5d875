"""Time `envbuild matrix list` and `envbuild report` on 10,000 synthetic runs and print the figures.

    python bench/report_scale.py [--runs 10000] [--repeat 3] [--keep DIR]

One matrix file is generated from a fixed seed (the same data for every command timed): runs spread
over the recipe cells and 120 days, ~10 % failed, ~5 % with a failed probe, a few image builds per
cell. Each command runs as a whole process (the `envbuild` entry point, as a user runs it), the
median of --repeat runs is printed. Targets (issue 13): report < 5 s, matrix list < 1 s.
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from builder.matrix.store import MatrixStore
from builder.plan.recipe_cells import recipe_cells

REPO = Path(__file__).resolve().parent.parent
_RESULT = {
    "schema_version": 1, "command": "train", "status": "pass", "error_class": None, "error": None,
    "wall_time_s": 41.2,
    "versions": {"transformers": "4.46.3", "peft": "0.13.2", "accelerate": "1.1.1", "numpy": "1.26.4",
                 "workload": "0.1.0", "cuda": None},
    "hardware": {"device_type": "cuda", "vendor": "amd", "gpu_name": "AMD Instinct MI250X", "gpu_count": 8,
                 "peak_tflops": 191.5},
    "model": {"id": "tiny-gemma", "family": "gemma", "num_parameters": 123456, "trainable_parameters": 4567},
    "dataset": {"path": "emotions.jsonl", "n_train": 180, "n_eval": 45},
    "config": {"preset": "smoke", "seed": 42, "dtype": "bf16", "world_size": 1},
    "host": {"hostname": "ci-runner-7", "kernel": "6.8.0-45-generic", "kernel_cmdline": "BOOT_IMAGE=/vmlinuz ro",
             "amdgpu_version": "6.8.5", "os": "Ubuntu 22.04.5 LTS", "gpus": [{"node": i, "arch": "gfx90a"} for i in range(8)]},
}


def synthetic_db(path: Path, runs: int, seed: int = 13) -> None:
    """`runs` results over the recipe cells (fixed seed), written in one transaction per 500 runs."""
    rng = random.Random(seed)
    cells = recipe_cells()
    start = datetime(2026, 8, 1, tzinfo=timezone.utc)
    with MatrixStore.open(path) as store:
        store._conn.execute("PRAGMA synchronous = OFF")  # generation speed only; the timed reads are unaffected
        for cell in cells:
            for _ in range(3):
                store.record_build(cell, status="pass", image_tag=f"envbuild/{cell.key}:{uuid.uuid4().hex[:12]}",
                                   image_digest="sha256:" + uuid.UUID(int=rng.getrandbits(128)).hex * 2,
                                   duration_s=rng.uniform(300, 1800), created_at=start.strftime("%Y-%m-%dT%H:%M:%SZ"))
        for i in range(runs):
            cell = cells[i % len(cells)]
            at = start + timedelta(minutes=rng.uniform(0, 120 * 24 * 60))
            result = copy.deepcopy(_RESULT)
            result["run_id"] = uuid.UUID(int=rng.getrandbits(128)).hex
            result["finished_at"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
            result["started_at"] = (at - timedelta(seconds=41)).strftime("%Y-%m-%dT%H:%M:%SZ")
            result["image"] = {"tag": f"envbuild/{cell.key}:abc", "digest": None, "manifest": {"cell": cell.model_dump()}}
            result["versions"].update(python=f"{cell.python}.4", torch=f"{cell.torch}.1",
                                      hip=f"{cell.accel_version}.41133" if cell.accel_version else None)
            result["hardware"]["arch"] = cell.arch
            sps = rng.gauss(50, 4)
            steps = 36
            result["metrics"] = {
                "eval_before": {"accuracy": 0.14, "macro_f1": 0.05, "loss": 1.95},
                "eval_after": {"accuracy": rng.uniform(0.6, 0.75), "macro_f1": 0.66, "loss": 0.9},
                "curves": {"train_loss": [[s, 2.0 - s / steps] for s in range(1, steps + 1)],
                           "grad_norm": [[s, 3.0 - s / 20] for s in range(1, steps + 1)]},
                "steps": steps, "samples_per_s": sps, "tokens_per_s": sps * 35, "mfu": sps / 250,
                "peak_memory_allocated_bytes": 2_000_000_000, "peak_memory_reserved_bytes": 2_400_000_000}
            probe_fail = rng.random() < 0.05
            result["probes"] = [
                {"name": "device_discovery", "status": "pass", "values": {"device_count": 8}, "message": ""},
                {"name": "sdpa_vs_math", "status": "fail" if probe_fail else "pass",
                 "values": {"max_abs_err": 0.2 if probe_fail else 0.0004}, "message": ""}]
            if rng.random() < 0.10:
                result.update(status="fail", error_class="nan_loss", error="loss became NaN at step 3")
            store.record_run(result)


def timed(args: list[str], repeat: int) -> float:
    """Median wall time of running `envbuild ARGS` as a whole process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "from builder.cli import main; main()", *args], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="Write the matrix and the site here (kept).")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="envbuild-report-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    db, site = work / "matrix.db", work / "site"
    if not db.exists():
        start = time.perf_counter()
        synthetic_db(db, args.runs)
        print(f"generated {args.runs} runs into {db} ({db.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - start:.1f} s")
    figures = {
        "matrix list": timed(["matrix", "list", "--db", str(db)], args.repeat),
        "matrix list --json": timed(["matrix", "list", "--json", "--db", str(db)], args.repeat),
        "report": timed(["report", "-o", str(site), "--db", str(db)], args.repeat),
        "envbuild --help (start-up floor)": timed(["--help"], args.repeat),
    }
    for name, seconds in figures.items():
        print(f"{name:40s} {seconds:6.2f} s  (median of {args.repeat}, whole process)")
    pages = list((site / "cells").glob("*.html"))
    data = list((site / "data").glob("*.json"))
    print(f"site: {len(pages)} cell pages (largest {max(p.stat().st_size for p in pages) / 1e3:.0f} kB),"
          f" data.json {(site / 'data.json').stat().st_size / 1e3:.0f} kB,"
          f" per-cell data files {sum(p.stat().st_size for p in data) / 1e6:.1f} MB in all"
          f" (largest {max(p.stat().st_size for p in data) / 1e6:.1f} MB)")
    print(f"targets: report < 5 s -> {'met' if figures['report'] < 5 else 'MISSED'};"
          f" matrix list < 1 s -> {'met' if figures['matrix list'] < 1 else 'MISSED'}")


if __name__ == "__main__":
    main()
