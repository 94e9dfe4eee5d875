"""Time the CLI as a user meets it: each command as a whole new process, several times, medians printed.

    python bench/cli_startup.py [--repeat 7]

Targets: `envbuild --help` and `envbuild render --help` under 0.25 s, `envbuild recipes list`
under 0.4 s. The process is `python -m builder ...` (the `envbuild` script minus its shim), output discarded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {  # command -> target seconds
    "--help": 0.25,
    "render --help": 0.25,
    "recipes list": 0.4,
    "python -c pass": None,  # the interpreter alone, for scale
}


def run_once(command: str) -> float:
    argv = (
        [sys.executable, "-c", "pass"]
        if command == "python -c pass"
        else [sys.executable, "-m", "builder", *command.split()]
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    start = time.perf_counter()
    subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True, cwd=tempfile.gettempdir()
    )  # `-m` puts the cwd first on sys.path: not this checkout
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    missed = 0
    for command, target in COMMANDS.items():
        run_once(command)  # warm the page cache
        median = statistics.median(run_once(command) for _ in range(args.repeat))
        verdict = "" if target is None else (" ok" if median < target else " MISSED")
        missed += verdict == " MISSED"
        label = command if command.startswith("python") else f"envbuild {command}"
        print(
            f"{label:<24} median {median:.3f} s of {args.repeat}"
            + ("" if target is None else f" (target < {target} s){verdict}")
        )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
