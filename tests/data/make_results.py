"""Re-make the result files of tests/data/results/ from real CPU runs (about 3 minutes on 2 cores).

    PYTHONPATH=. python3 tests/data/make_results.py

smoke-pass: `python -m workload train --preset smoke`; killed: `envbuild run workload --local`
whose workload is SIGKILLed mid-training; interrupted: the same, SIGINT (Ctrl-C); bad-data: a data
file with no label column. The `host` block (this machine's doctor record) is dropped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent / "results"
ENVBUILD = [sys.executable, "-c", "from builder.cli import main; main()"]


def keep(name: str, out: Path) -> None:
    result = json.loads((out / "result.json").read_text())
    result.pop("host", None)
    (HERE / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(name, result["status"], result.get("error_class"))


def stopped(out: Path, how) -> None:
    """`envbuild run workload --local` stopped by `how(proc)` once training has started."""
    proc = subprocess.Popen(
        [*ENVBUILD, "run", "workload", "--local", "--out", str(out), "--no-record"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # also from a background job
    seen = ""
    while "step" not in seen:
        seen += proc.stdout.readline()
    how(proc)
    proc.communicate(timeout=120)


def kill_workload(proc) -> None:
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    os.kill(int(children[0]), signal.SIGKILL)


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    subprocess.run(
        [sys.executable, "-m", "workload", "train", "--preset", "smoke", "--out", str(tmp / "pass")], check=True
    )
    keep("smoke-pass", tmp / "pass")
    stopped(tmp / "killed", kill_workload)
    keep("killed", tmp / "killed")
    stopped(tmp / "interrupted", lambda proc: proc.send_signal(signal.SIGINT))
    keep("interrupted", tmp / "interrupted")
    bad = tmp / "bad.jsonl"
    bad.write_text('{"text": "no label here"}\n' * 20)
    subprocess.run([sys.executable, "-m", "workload", "train", "--data", str(bad), "--out", str(tmp / "bad")])
    keep("bad-data", tmp / "bad")


if __name__ == "__main__":
    main()
