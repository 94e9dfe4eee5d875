"""ci/scripts/matrix_history.sh, the report job's step that keeps the matrix across workflow runs.

Run for real against a local bare repository standing in for GitHub's: the first workflow run creates the
data branch, the second starts from it, so a cell measured last week (and not this week) keeps its run.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

from repo import REPO_ROOT
from matrix_fixtures import cpu_result, make_result

SCRIPT = REPO_ROOT / "ci" / "scripts" / "matrix_history.sh"
BRANCH = "envbuild-matrix-data"
ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=ENV).stdout


def _checkout(tmp_path: Path) -> Path:
    """A clone of a bare 'origin' holding one commit on main, as actions/checkout leaves it."""
    origin = tmp_path / "origin.git"
    _git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    seed = tmp_path / "seed"
    _git(tmp_path, "clone", "-q", str(origin), str(seed))
    (seed / "README.md").write_text("project\n")
    _git(seed, "add", "README.md")
    _git(seed, "commit", "-q", "-m", "code")
    _git(seed, "push", "-q", "origin", "HEAD:main")
    checkout = tmp_path / "checkout"
    _git(tmp_path, "clone", "-q", "--depth=1", str(origin), str(checkout))
    return checkout


def _workflow_run(checkout: Path, run_dir: Path, results: list[dict]) -> subprocess.CompletedProcess:
    run_dir.mkdir(parents=True, exist_ok=True)
    artifacts = run_dir / "artifacts"
    for result in results:
        job = artifacts / f"result-{result['run_id'][:8]}" / "run"
        job.mkdir(parents=True)
        (job / "result.json").write_text(json.dumps(result))
    return subprocess.run(
        ["bash", str(SCRIPT), BRANCH, str(artifacts), str(run_dir / "matrix.db")],
        cwd=checkout,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )


def _run_ids(db: Path) -> set[str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return {row[0] for row in conn.execute("SELECT run_id FROM runs")}


def test_history_survives_a_week_without_the_cells_runner(tmp_path):
    checkout = _checkout(tmp_path)
    rocm, cpu = make_result(), cpu_result()
    first = _workflow_run(checkout, tmp_path / "run1", [rocm, cpu])
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"no {BRANCH} branch yet" in first.stdout and f"committed to {BRANCH}" in first.stdout

    newer_cpu = cpu_result()  # week 2: the ROCm runner is offline, only the cpu cell reports
    second = _workflow_run(checkout, tmp_path / "run2", [newer_cpu])
    assert second.returncode == 0, second.stdout + second.stderr
    assert "1 earlier run(s)" in second.stdout
    assert _run_ids(tmp_path / "run2" / "matrix.db") == {rocm["run_id"], cpu["run_id"], newer_cpu["run_id"]}

    origin = tmp_path / "origin.git"
    log = _git(origin, "log", "--format=%s", BRANCH).splitlines()
    assert len(log) == 2 and all(line.startswith("matrix: ") for line in log)
    assert _git(origin, "ls-tree", "--name-only", BRANCH).split() == ["matrix.db"]  # data only, no code
    assert _git(origin, "log", "--format=%s", "main").splitlines() == ["code"]  # main untouched

    again = _workflow_run(checkout, tmp_path / "run3", [])  # nothing new: no empty commit
    assert again.returncode == 0 and "unchanged" in again.stdout
    assert len(_git(origin, "log", "--format=%s", BRANCH).splitlines()) == 2
