"""Time rendering the whole recipe matrix (every known cell) and print the figures.

    python bench/render_matrix.py [--repeat 5]

Reports the best of N runs for: resolving every cell, rendering every build context in memory
(one shared snapshot of images/common + workload/, as `envbuild ci render`-style callers do),
the baseline that re-reads those shared files for every cell, and writing every context to disk.
The target: the whole matrix well under a second (in memory).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from builder.plan.recipes import load
from builder.plan.render import StaticFiles, context_files, render
from builder.plan.resolve import all_plans


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    recipes = load()
    plans = all_plans(recipes)
    resolve_s = best_of(args.repeat, lambda: all_plans(recipes))

    def shared():
        static = StaticFiles.read()
        for plan in plans:
            context_files(plan, static)

    def baseline():
        for plan in plans:
            context_files(plan)  # re-reads images/common and workload/ for every cell

    shared_s = best_of(args.repeat, shared)
    baseline_s = best_of(args.repeat, baseline)

    out = Path(tempfile.mkdtemp(prefix="envbuild-bench-"))
    try:

        def to_disk():
            static = StaticFiles.read()
            for i, plan in enumerate(plans):
                render(plan, out / f"{i:03d}", static)

        disk_s = best_of(max(1, args.repeat // 2), to_disk)
        files = sum(1 for _ in out.rglob("*") if _.is_file()) if out.exists() else 0
    finally:
        shutil.rmtree(out, ignore_errors=True)

    n = len(plans)
    total = resolve_s + shared_s
    print(f"cells in the recipe matrix:        {n}")
    print(f"resolve all cells:                 {resolve_s * 1e3:8.1f} ms")
    print(f"render all contexts in memory:     {shared_s * 1e3:8.1f} ms  ({shared_s / n * 1e3:.2f} ms/cell)")
    print(
        f"  baseline (re-read shared files): {baseline_s * 1e3:8.1f} ms  "
        f"-> shared snapshot is {baseline_s / shared_s:.1f}x faster"
    )
    print(f"resolve + render (in memory):      {total * 1e3:8.1f} ms  = {total:.3f}x the 1 s budget")
    print(f"write all contexts to disk:        {disk_s * 1e3:8.1f} ms  ({files} files, {disk_s / n * 1e3:.2f} ms/cell)")


if __name__ == "__main__":
    main()
