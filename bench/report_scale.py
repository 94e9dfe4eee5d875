"""Time the matrix's reading commands on 10,000 realistic runs and print the figures against their targets.

    python bench/report_scale.py [--runs 10000] [--cells 150] [--repeat 3] [--keep DIR] [--small] [--baseline SRC] [--no-settle]

One matrix file is generated from a fixed seed (the same data for every command timed). Default
(realistic): every run is one of the committed real result files (results/, tests/data/)
with its values varied (run id, times over 120 days, throughput, losses along the curves, accuracy,
status: ~10 % failed, ~5 % with a failed probe), about 16 KB each, spread over --cells cells (the
recipe cells plus made-up ROCm/arch/Python combinations); every run has its own image, recorded as a build
of its cell with a verify record (nightly rebuilds), and one in five is a `speed` preset run. `--small`: the older synthetic ~4 KB
results over the 17 recipe cells. Each command runs as a whole process (the `envbuild`
entry point, as a user runs it); the median of --repeat runs is printed, and the peak memory (max RSS)
of `matrix export --json`. Targets: report < 5 s, matrix list < 1 s, matrix show CELL < 1 s,
matrix check < 3 s, export --json < 300 MB peak, the site's largest file < 1 MB. `--baseline SRC`: also
time every command with another envbuild source tree (e.g. `git archive main | tar -x -C /tmp/main`) on the same
matrix file, interleaved run by run, and print this tree's time as a ratio of that one's: a same-session
comparison that the machine's load affects alike.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
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

from builder.store.store import MatrixStore
from builder.plan.cells import Cell
from builder.plan.recipe_cells import recipe_cells

REPO = Path(__file__).resolve().parent.parent
_RESULT = {
    "schema_version": 1,
    "command": "train",
    "status": "pass",
    "error_class": None,
    "error": None,
    "wall_time_s": 41.2,
    "versions": {
        "transformers": "4.46.3",
        "peft": "0.13.2",
        "accelerate": "1.1.1",
        "numpy": "1.26.4",
        "workload": "0.1.0",
        "cuda": None,
    },
    "hardware": {
        "device_type": "cuda",
        "vendor": "amd",
        "gpu_name": "AMD Instinct MI250X",
        "gpu_count": 8,
        "peak_tflops": 191.5,
    },
    "model": {"id": "tiny-gemma", "family": "gemma", "num_parameters": 123456, "trainable_parameters": 4567},
    "dataset": {"path": "emotions.jsonl", "n_train": 180, "n_eval": 45},
    "config": {"preset": "smoke", "seed": 42, "dtype": "bf16", "world_size": 1},
    "host": {
        "hostname": "ci-runner-7",
        "kernel": "6.8.0-45-generic",
        "kernel_cmdline": "BOOT_IMAGE=/vmlinuz ro",
        "amdgpu_version": "6.8.5",
        "os": "Ubuntu 22.04.5 LTS",
        "gpus": [{"node": i, "arch": "gfx90a"} for i in range(8)],
    },
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
                store.record_build(
                    cell,
                    status="pass",
                    image_tag=f"envbuild/{cell.key}:{uuid.uuid4().hex[:12]}",
                    image_digest="sha256:" + uuid.UUID(int=rng.getrandbits(128)).hex * 2,
                    duration_s=rng.uniform(300, 1800),
                    created_at=start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                )
        for i in range(runs):
            cell = cells[i % len(cells)]
            at = start + timedelta(minutes=rng.uniform(0, 120 * 24 * 60))
            result = copy.deepcopy(_RESULT)
            result["run_id"] = uuid.UUID(int=rng.getrandbits(128)).hex
            result["finished_at"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
            result["started_at"] = (at - timedelta(seconds=41)).strftime("%Y-%m-%dT%H:%M:%SZ")
            result["image"] = {
                "tag": f"envbuild/{cell.key}:abc",
                "digest": None,
                "manifest": {"cell": cell.model_dump()},
            }
            result["versions"].update(
                python=f"{cell.python}.4",
                torch=f"{cell.torch}.1",
                hip=f"{cell.accel_version}.41133" if cell.accel_version else None,
            )
            result["hardware"]["arch"] = cell.arch
            sps = rng.gauss(50, 4)
            steps = 36
            result["metrics"] = {
                "eval_before": {"accuracy": 0.14, "macro_f1": 0.05, "loss": 1.95},
                "eval_after": {"accuracy": rng.uniform(0.6, 0.75), "macro_f1": 0.66, "loss": 0.9},
                "curves": {
                    "train_loss": [[s, 2.0 - s / steps] for s in range(1, steps + 1)],
                    "grad_norm": [[s, 3.0 - s / 20] for s in range(1, steps + 1)],
                },
                "steps": steps,
                "samples_per_s": sps,
                "tokens_per_s": sps * 35,
                "mfu": sps / 250,
                "peak_memory_allocated_bytes": 2_000_000_000,
                "peak_memory_reserved_bytes": 2_400_000_000,
            }
            probe_fail = rng.random() < 0.05
            result["probes"] = [
                {"name": "device_discovery", "status": "pass", "values": {"device_count": 8}, "message": ""},
                {
                    "name": "sdpa_vs_math",
                    "status": "fail" if probe_fail else "pass",
                    "values": {"max_abs_err": 0.2 if probe_fail else 0.0004},
                    "message": "",
                },
            ]
            if rng.random() < 0.10:
                result.update(status="fail", error_class="nan_loss", error="loss became NaN at step 3")
            store.record_run(result)


def real_templates() -> list[dict]:
    """The committed real result files (train runs, with curves), the host block kept where present."""
    paths = sorted(
        [*REPO.glob("results/**/result.json"), *REPO.glob("tests/data/*.json"), *REPO.glob("tests/data/results/*.json")]
    )
    return [r for r in (json.loads(p.read_text()) for p in paths) if (r.get("metrics") or {}).get("curves")]


def bench_cells(count: int) -> list[Cell]:
    """The recipe cells, then made-up ROCm x torch x arch x Python cells (fixed order) up to `count` (up to ~7,500)."""
    cells = list(recipe_cells())
    seen = {c.key for c in cells}
    for rocm in ("6.0", "6.1", "6.2", "6.3", "6.4", "7.0"):
        for torch in ("2.3", "2.4", "2.5", "2.6", "2.7", "2.8"):
            for arch in ("gfx90a", "gfx942", "gfx1100", "gfx950"):
                for python in ("3.10", "3.12"):
                    cell = Cell(flavor="rocm", accel_version=rocm, torch=torch, arch=arch, python=python)
                    if len(cells) < count and cell.key not in seen:
                        cells.append(cell)
                        seen.add(cell.key)
    # beyond those (a report of thousands of cells): patch releases, more torch lines, archs and Pythons
    for rocm in (f"{major}.{minor}.{patch}" for major in (6, 7) for minor in range(5) for patch in range(1, 4)):
        for torch in (f"2.{minor}" for minor in range(3, 13)):
            for arch in ("gfx90a", "gfx942", "gfx1100", "gfx950", "gfx1030", "gfx1201"):
                for python in ("3.10", "3.11", "3.12", "3.13"):
                    if len(cells) >= count:
                        return cells[:count]
                    cell = Cell(flavor="rocm", accel_version=rocm, torch=torch, arch=arch, python=python)
                    if cell.key not in seen:
                        cells.append(cell)
                        seen.add(cell.key)
    return cells[:count]


def realistic_db(path: Path, runs: int, n_cells: int, seed: int = 13) -> None:
    """`runs` varied copies of the real result files over `n_cells` cells (fixed seed)."""
    rng = random.Random(seed)
    # the smoke runs: the bench makes its own standard speed rounds (below) from them
    templates = [t for t in real_templates() if (t.get("config") or {}).get("preset") != "speed"]
    manifest = next(t["image"]["manifest"] for t in templates if (t.get("image") or {}).get("manifest"))
    cells = bench_cells(n_cells)
    start = datetime(2026, 8, 1, tzinfo=timezone.utc)
    with MatrixStore.open(path) as store:
        store._conn.execute("PRAGMA synchronous = OFF")  # generation speed only; the timed reads are unaffected
        for cell in cells:
            store.record_build(
                cell,
                status="pass",
                image_tag=f"envbuild/{cell.key}:{uuid.uuid4().hex[:12]}",
                image_digest="sha256:" + uuid.UUID(int=rng.getrandbits(128)).hex * 2,
                duration_s=rng.uniform(300, 1800),
                created_at=start.strftime("%Y-%m-%dT%H:%M:%SZ"),
            )
        for i in range(runs):
            cell = cells[i % len(cells)]
            result = copy.deepcopy(templates[i % len(templates)])
            at = start + timedelta(minutes=rng.uniform(0, 120 * 24 * 60))
            result["run_id"] = uuid.UUID(int=rng.getrandbits(128)).hex
            result["finished_at"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
            result["started_at"] = (at - timedelta(seconds=rng.uniform(30, 600))).strftime("%Y-%m-%dT%H:%M:%SZ")
            # every run as `envbuild run workload --image` records it: with the image's manifest
            # nightly rebuilds: every run has its own image, recorded as a build of its cell (with its verify record)
            tag, digest = f"envbuild/{cell.key}:{i:012d}", "sha256:" + uuid.UUID(int=rng.getrandbits(128)).hex * 2
            image_manifest = {**copy.deepcopy(manifest), "cell": cell.model_dump(), "cell_key": cell.key}
            build_id = store.record_build(
                cell,
                status="pass",
                image_tag=tag,
                image_digest=digest,
                duration_s=rng.uniform(300, 1800),
                created_at=(at - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                manifest={**image_manifest, "verify": {"checks": ["torch", "hip"] * 20}},
            )
            result["image"] = {"tag": tag, "digest": digest, "manifest": image_manifest}
            if (i // len(cells)) % 5 == 0:  # the standard speed measurement: one round over the cells in five
                result["config"] = {**(result.get("config") or {}), "preset": "speed"}
                result.pop("invocation", None)
            result["versions"].update(
                python=f"{cell.python}.4",
                torch=f"{cell.torch}.1",
                hip=f"{cell.accel_version}.41133" if cell.accel_version else None,
                cuda=None,
            )
            result["hardware"].update(arch=cell.arch, device_type="cuda", vendor="amd", gpu_name="AMD Instinct MI300X")
            metrics = result["metrics"]
            scale = rng.lognormvariate(0, 0.2)
            for key in ("samples_per_s", "tokens_per_s"):
                if metrics.get(key) is not None:
                    metrics[key] = metrics[key] * scale
            if metrics.get("mfu") is not None:
                metrics["mfu"] = min(metrics["mfu"] * scale, 1.0)
            for curve in (metrics.get("curves") or {}).values():
                for point in curve:
                    if point[1] is not None and math.isfinite(point[1]):
                        point[1] = point[1] * rng.uniform(0.95, 1.05)
            for when in ("eval_before", "eval_after"):
                if metrics.get(when) and metrics[when].get("accuracy") is not None:
                    metrics[when]["accuracy"] = min(1.0, metrics[when]["accuracy"] * rng.uniform(0.9, 1.1))
            if rng.random() < 0.05 and result.get("probes"):
                result["probes"][-1].update(status="fail", message="max abs error 0.2 > 0.01")
            if rng.random() < 0.10:
                result.update(status="fail", error_class="nan_loss", error="loss became NaN at step 3")
            elif result["status"] == "pass":
                result.update(error_class=None, error=None)
            store.record_run(result, build_id=build_id)


#: Whether each timed command starts with the previous one's writes on disk (os.sync before the clock starts).
SETTLE = True


def _envbuild(args: list[str], source: Path = REPO):
    """Run `envbuild ARGS` (from the tree `source`) as a whole process, output discarded: (wall s, resource usage).
    With SETTLE, the files earlier commands wrote are flushed first, outside the timing: a report replaces the last
    report's site, and removing ~190 MB written seconds before waits on their writeback (seconds on this VM), which
    a site written minutes or hours before does not."""
    if SETTLE:
        os.sync()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from builder.cli import main; main()", *args],
        env={**os.environ, "PYTHONPATH": str(source)},
        cwd=source,  # `-c` puts the working
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # folder first on sys.path
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"envbuild {' '.join(args)} exited {os.waitstatus_to_exitcode(status)}")
    return time.perf_counter() - start, usage


def timed(args: list[str], repeat: int, baseline: Path | None = None) -> float:
    """Median wall time of running `envbuild ARGS` as a whole process (its CPU time is noted in CPU_S); with
    `baseline`, the same command from that tree runs right after each one (its median noted in BASELINE_S)."""
    times, cpu, base = [], [], []
    for _ in range(repeat):
        wall, usage = _envbuild(args)
        times.append(wall)
        cpu.append(usage.ru_utime + usage.ru_stime)
        if baseline is not None:
            base.append(_envbuild(args, baseline)[0])
    CPU_S.append(statistics.median(cpu))
    BASELINE_S.append(statistics.median(base) if base else None)
    return statistics.median(times)


#: Median CPU seconds (user + system) of each timed command, in order: what a loaded machine inflates least.
CPU_S: list[float] = []
#: Median wall seconds of the same commands from the --baseline tree, in order (None without one).
BASELINE_S: list[float | None] = []


def peak_rss_mb(args: list[str]) -> float:
    """Peak resident memory (MB) of one `envbuild ARGS` process, output discarded."""
    return _envbuild(args)[1].ru_maxrss / 1024


def main() -> None:
    global SETTLE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--cells", type=int, default=150, help="Cells the runs are spread over (realistic mode).")
    parser.add_argument("--small", action="store_true", help="The older synthetic ~4 KB results over the recipe cells.")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="Write the matrix and the site here (kept).")
    parser.add_argument("--baseline", type=Path, help="Another envbuild source tree to time on the same matrix.")
    parser.add_argument(
        "--no-settle",
        action="store_true",
        help="Time each command right after the last one's writes, without flushing them to disk first.",
    )
    args = parser.parse_args()
    SETTLE = not args.no_settle
    args.baseline = args.baseline.resolve() if args.baseline else None
    load_start = os.getloadavg()[0]
    work = (args.keep or Path(tempfile.mkdtemp(prefix="envbuild-report-scale-"))).resolve()  # commands run elsewhere
    work.mkdir(parents=True, exist_ok=True)
    db, site = work / "matrix.db", work / "site"
    if not db.exists():
        start = time.perf_counter()
        if args.small:
            synthetic_db(db, args.runs)
        else:
            realistic_db(db, args.runs, args.cells)
        print(
            f"generated {args.runs} runs into {db} ({db.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - start:.1f} s"
        )
    with MatrixStore.open(db, readonly=True) as store:
        busiest = max(store.cells(), key=lambda c: len(store.runs_json(c.key))).key
    figures = {
        "matrix list": timed(["matrix", "list", "--db", str(db)], args.repeat, args.baseline),
        "matrix list --json": timed(["matrix", "list", "--json", "--db", str(db)], args.repeat, args.baseline),
        "matrix show CELL": timed(["matrix", "show", busiest, "--db", str(db)], args.repeat, args.baseline),
        "matrix check": timed(["matrix", "check", "--db", str(db)], args.repeat, args.baseline),
        "matrix export --json": timed(["matrix", "export", "--json", "--db", str(db)], args.repeat, args.baseline),
        "report": timed(["report", "-o", str(site), "--db", str(db)], args.repeat, args.baseline),
        "envbuild --help (start-up floor)": timed(["--help"], args.repeat, args.baseline),
    }
    for (name, seconds), cpu, base in zip(figures.items(), CPU_S, BASELINE_S):
        ratio = f"; {seconds / base:.2f}x the baseline's {base:.2f} s" if base else ""
        print(f"{name:40s} {seconds:6.2f} s  (median of {args.repeat}, whole process; CPU {cpu:.2f} s{ratio})")
    print(
        f"load average while measuring: {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end,"
        f" on {os.cpu_count()} cores"
    )
    export_mb = peak_rss_mb(["matrix", "export", "--json", "--db", str(db)])
    report_mb = peak_rss_mb(["report", "-o", str(site), "--db", str(db)])
    print(f"{'matrix export --json peak memory':40s} {export_mb:6.0f} MB;  report peak memory {report_mb:.0f} MB")
    pages = list((site / "cells").glob("*.html"))
    data = list((site / "data").glob("*.json"))
    largest = max((p for p in site.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    print(
        f"site: {len(pages)} cell pages (largest {max(p.stat().st_size for p in pages) / 1e3:.0f} kB),"
        f" data.json {(site / 'data.json').stat().st_size / 1e3:.0f} kB,"
        f" per-cell data files {sum(p.stat().st_size for p in data) / 1e6:.1f} MB in all"
        f" (largest {max(p.stat().st_size for p in data) / 1e6:.1f} MB);"
        f" largest file {largest.relative_to(site)} {largest.stat().st_size / 1e6:.2f} MB"
    )
    targets = [
        ("report < 5 s", figures["report"] < 5),
        ("matrix list < 1 s", figures["matrix list"] < 1),
        ("matrix show CELL < 1 s", figures["matrix show CELL"] < 1),
        ("matrix check < 3 s", figures["matrix check"] < 3),
        ("export --json < 300 MB peak", export_mb < 300),
        ("site's largest file < 1 MB", largest.stat().st_size < 1e6),
    ]
    print("targets: " + "; ".join(f"{name} -> {'met' if ok else 'MISSED'}" for name, ok in targets))


if __name__ == "__main__":
    main()
