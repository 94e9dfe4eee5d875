"""A report stopped by Ctrl-C or SIGTERM exits 130 / 143 and leaves no building folder; one killed outright
(SIGKILL) leaves folders that the next report sweeps, while a live report's folder is left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.plan.cells import Cell
from builder.store.store import MatrixStore
from matrix_fixtures import make_result

REPO = Path(__file__).resolve().parents[2]
ENVBUILD = [sys.executable, "-c", "from builder.cli import main; main()"]


@pytest.fixture(scope="module")
def busy_db(tmp_path_factory) -> Path:
    """120 cells of 3 runs: a report that takes seconds here, long enough to be stopped while writing."""
    db = tmp_path_factory.mktemp("busy") / "m.db"
    with MatrixStore.open(db) as store:
        store._conn.execute("PRAGMA synchronous = OFF")
        for n in range(120):
            cell = Cell(
                flavor="rocm", accel_version=f"6.{n // 24}", torch=f"2.{n % 6}", arch=f"gfx9{n % 4}a", python="3.10"
            )
            for day in (1, 2, 3):
                store.record_run(
                    make_result(
                        finished_at=f"2026-11-0{day}T10:00:00Z",
                        image={"tag": "t", "manifest": {"cell": cell.model_dump()}},
                    )
                )
    return db


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _litter(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".building-" in p.name or ".old-" in p.name)


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stopped_report_exits_with_the_signal_code_and_leaves_nothing(busy_db, tmp_path, signum, code):
    out = tmp_path / "site"
    proc = subprocess.Popen(
        [*ENVBUILD, "report", "-o", str(out), "--db", str(busy_db), "--no-recipes"],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not _litter(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, "the report finished before it could be stopped"
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert "Aborted!" not in stderr and "Traceback" not in stderr
    assert _litter(tmp_path) == [] and not out.exists()


def test_folders_of_a_killed_report_are_swept_by_the_next_one(busy_db, tmp_path):
    out = tmp_path / "site"
    dead = subprocess.run(["true"], check=True)  # a process id that is gone
    del dead
    sleeper = subprocess.Popen(["sleep", "60"])  # a live process: its folder is a report in progress
    try:
        stale_building = tmp_path / ".site.building-999999999-abc123"
        stale_old = tmp_path / ".site.old-1a2b3c4d"  # an older envbuild's name: no process id
        live = tmp_path / f".site.building-{sleeper.pid}-xyz789"
        other = tmp_path / ".other.building-999999999-abc123"  # another site's: not ours to sweep
        for folder in (stale_building, stale_old, live, other):
            folder.mkdir()
            (folder / "index.html").write_text("partial")
        result = subprocess.run(
            [*ENVBUILD, "report", "-o", str(out), "--db", str(busy_db), "--no-recipes"],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        assert "removed .site.building-999999999-abc123" in result.stderr
        assert _litter(tmp_path) == sorted([live.name, other.name])
    finally:
        sleeper.kill()
        sleeper.wait()
