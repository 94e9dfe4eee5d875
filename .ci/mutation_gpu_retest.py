"""A mutation run's survivors tested again where torch sees a GPU (docs/mutation/varlen.md).

`bash .ci/mutation.sh` runs where there is no GPU, so a module's GPU-only tests skip there. This applies each
survivor's diff from the run's summary (`$MUTATION_OUT/MODULE.txt`) to its own copy of the tree, runs the given
pytest arguments once unmutated and once per survivor (a few at a time), and prints one verdict line per mutant
with the failure's first `E` lines. It needs only Python, pytest and `patch`, not cosmic-ray:

    python3 .ci/mutation_gpu_retest.py SUMMARY.txt LINES -- PYTEST_ARGS...
    python3 .ci/mutation_gpu_retest.py .mutation/varlen.txt 59,70,80,87 -- --noconftest -x -q \\
        tests/workload/test_workload_varlen.py -k "varlen_packed or training_with"

LINES (comma-separated, or `all`) picks the survivors by the line they start on. PARALLEL (default 6) sets how
many run at a time."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def survivors(summary: str, lines: set[int] | None) -> list[tuple[str, str]]:
    """(label, diff) of each survivor in a summary written by .ci/mutation.py, on `lines` (None: all)."""
    found = []
    for part in re.split(r"\n(?=SURVIVED line )", summary)[1:]:
        head, _, rest = part.partition("\n")
        line, operator = re.match(r"SURVIVED line (\d+): (.+)", head).groups()
        diff = rest.split("--- mutation diff ---\n", 1)[1].split("\nEQUIVALENT line", 1)[0].rstrip("\n") + "\n"
        if lines is None or int(line) in lines:
            found.append((f"line {line}: {operator}", diff))
    return found


def run_one(label: str, diff: str, pytest_args: list[str], work: Path) -> tuple[str, str, str, float]:
    tree = Path(tempfile.mkdtemp(dir=work))
    shutil.copytree(
        ROOT, tree, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git", ".venv", ".mutation", "__pycache__")
    )
    if diff:
        applied = subprocess.run(["patch", "-p1"], input=diff, text=True, cwd=tree, capture_output=True)
        if applied.returncode:
            return label, "NOT APPLIED", applied.stdout + applied.stderr, 0.0
    start = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *pytest_args],
            cwd=tree,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
    except subprocess.TimeoutExpired:
        return label, "KILLED (timeout)", "", time.monotonic() - start
    out = done.stdout.splitlines()
    shown = [line for line in out if line.startswith("E ")][:3] + out[-2:]
    return label, "SURVIVED" if done.returncode == 0 else "KILLED", "\n".join(shown), time.monotonic() - start


def main() -> None:
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        sys.exit(__doc__)
    summary, lines_arg, pytest_args = Path(sys.argv[1]).read_text(), sys.argv[2], sys.argv[4:]
    lines = None if lines_arg == "all" else {int(n) for n in lines_arg.split(",")}
    items = [("unmutated", "")] + survivors(summary, lines)
    with (
        tempfile.TemporaryDirectory(prefix="envbuild-gpu-retest-") as work,
        ThreadPoolExecutor(int(os.environ.get("PARALLEL", "6"))) as pool,
    ):
        for label, verdict, shown, seconds in pool.map(lambda item: run_one(*item, pytest_args, Path(work)), items):
            print(f"== {label}: {verdict} ({seconds:.0f} s)\n   " + shown.replace("\n", "\n   "), flush=True)
            if label == "unmutated" and verdict != "SURVIVED":
                print("the tests fail without any mutant: every verdict below means nothing", flush=True)


if __name__ == "__main__":
    main()
