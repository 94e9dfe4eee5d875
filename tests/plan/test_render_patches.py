"""images/common/apply_patches.sh on a real throwaway git repository: check, then apply, or stop clearly -- with
each form a series entry takes (a local patch file, an upstream commit by SHA, a published patch by URL and sha256)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from builder.paths import IMAGES_DIR, RECIPES_DIR

APPLY = IMAGES_DIR / "common" / "apply_patches.sh"


def git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e",
        "HOME": str(cwd),
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def upstream(tmp_path):
    """A repo with a v1 tag and a later fix commit; returns (repo, sha of the fix)."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "setup.py").write_text("VERSION = '1.0'\nJOBS = 1\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "v1")
    git(repo, "tag", "v1")
    (repo / "setup.py").write_text("VERSION = '1.0'\nJOBS = 2\n")
    git(repo, "commit", "-q", "-am", "fix jobs")
    return repo, git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def checkout(tmp_path, upstream):
    repo, _ = upstream
    dest = tmp_path / "src"
    git(tmp_path, "clone", "-q", "--branch", "v1", f"file://{repo}", str(dest))
    return dest


def patch_file(directory: Path, name: str, old: str, new: str) -> None:
    body = (
        "Why: example fix for the test.\nUpstream: https://example.invalid/pull/1\n\n"
        "diff --git a/setup.py b/setup.py\n--- a/setup.py\n+++ b/setup.py\n"
        f"@@ -1,2 +1,2 @@\n VERSION = '1.0'\n-{old}\n+{new}\n"
    )
    (directory / name).write_text(body)


def run_series(tmp_path: Path, checkout: Path, series: str):
    patches = tmp_path / "patches"
    patches.mkdir(exist_ok=True)
    (patches / "series").write_text(series)
    return subprocess.run(["bash", str(APPLY), str(patches), str(checkout)], capture_output=True, text=True)


def test_patch_that_applies_is_applied(tmp_path, checkout):
    (tmp_path / "patches").mkdir()
    patch_file(tmp_path / "patches", "0001-jobs.patch", "JOBS = 1", "JOBS = 4")
    result = run_series(tmp_path, checkout, "# comment\n\npatch 0001-jobs.patch\n")
    assert result.returncode == 0, result.stderr
    assert "JOBS = 4" in (checkout / "setup.py").read_text()
    assert "patch series: 1 applied" in result.stdout


def test_patch_that_does_not_apply_stops_with_a_clear_message(tmp_path, checkout):
    (tmp_path / "patches").mkdir()
    patch_file(tmp_path / "patches", "0001-ok.patch", "JOBS = 1", "JOBS = 4")
    patch_file(tmp_path / "patches", "0002-stale.patch", "JOBS = 9", "JOBS = 5")
    result = run_series(tmp_path, checkout, "patch 0001-ok.patch\npatch 0002-stale.patch\n")
    assert result.returncode == 1
    assert "patch 0002-stale.patch does not apply to the source at" in result.stderr
    assert "JOBS = 5" not in (checkout / "setup.py").read_text()


def test_upstream_commit_is_fetched_checked_and_applied(tmp_path, checkout, upstream):
    _, fix = upstream
    result = run_series(tmp_path, checkout, f"commit {fix} https://example.invalid/pull/2  # the jobs fix\n")
    assert result.returncode == 0, result.stderr
    assert "JOBS = 2" in (checkout / "setup.py").read_text()
    assert f"applied commit {fix}" in result.stdout


def test_unknown_upstream_commit_fails_clearly(tmp_path, checkout):
    missing = "f" * 40
    result = run_series(tmp_path, checkout, f"commit {missing} https://example.invalid/pull/3\n")
    assert result.returncode == 1
    assert f"cannot fetch upstream commit {missing}" in result.stderr


def test_shipped_comment_only_series_applies_nothing(tmp_path, checkout):
    shipped = (RECIPES_DIR / "patches" / "torch-2.6" / "series").read_text()  # comments only
    result = run_series(tmp_path, checkout, shipped)
    assert result.returncode == 0 and "patch series: 0 applied" in result.stdout
    assert git(checkout, "status", "--porcelain") == ""


#: A distribution's published patch as Gentoo writes them: a description, then a plain unified diff (no
#: `diff --git` header).
PUBLISHED = (
    "Raises the job count (example of a distribution's patch).\nBackports upstream PR: https://example.invalid/pull/9\n"
    "--- a/setup.py\n+++ b/setup.py\n@@ -1,2 +1,2 @@\n VERSION = '1.0'\n-JOBS = 1\n+JOBS = 8\n"
)


def published(tmp_path: Path, text: str = PUBLISHED) -> tuple[str, str]:
    """The patch `text` served at a file:// URL (what curl reads like https), and its sha256."""
    served = tmp_path / "served" / "caffe2-1.0-example.patch"
    served.parent.mkdir(exist_ok=True)
    served.write_text(text)
    return served.as_uri(), hashlib.sha256(served.read_bytes()).hexdigest()


def test_published_patch_is_fetched_checked_against_its_sha256_and_applied(tmp_path, checkout):
    url, sha = published(tmp_path)
    result = run_series(tmp_path, checkout, f"url {url} sha256:{sha} https://example.invalid/pull/9  # more jobs\n")
    assert result.returncode == 0, result.stderr
    assert "JOBS = 8" in (checkout / "setup.py").read_text()
    assert f"applied url {url}" in result.stdout and "patch series: 1 applied" in result.stdout


def test_published_patch_whose_bytes_do_not_match_the_pinned_sha256_is_refused_and_nothing_changes(tmp_path, checkout):
    url, sha = published(tmp_path)
    pinned = hashlib.sha256(PUBLISHED.replace("JOBS = 8", "JOBS = 9").encode()).hexdigest()
    result = run_series(tmp_path, checkout, f"url {url} sha256:{pinned} https://example.invalid/pull/9\n")
    assert result.returncode == 1
    assert f"patch {url} has sha256 {sha}, the series pins {pinned}; refusing it" in result.stderr
    assert git(checkout, "status", "--porcelain") == ""


def test_published_patch_that_cannot_be_fetched_fails_clearly(tmp_path, checkout):
    missing = (tmp_path / "nowhere" / "x.patch").as_uri()
    result = run_series(tmp_path, checkout, f"url {missing} sha256:{'0' * 64} https://example.invalid/pull/9\n")
    assert result.returncode == 1
    assert f"cannot fetch patch {missing} (https://example.invalid/pull/9)" in result.stderr


def test_a_series_of_every_form_applies_in_order_to_the_pinned_commit(tmp_path, checkout, upstream):
    """commit (JOBS 1 -> 2), then the project's own patch on top (2 -> 4), then a published patch (4 -> 8): each
    entry sees the tree the one before left, so the order of the series is the order of application."""
    _, fix = upstream
    (tmp_path / "patches").mkdir()
    patch_file(tmp_path / "patches", "0001-jobs.patch", "JOBS = 2", "JOBS = 4")
    url, sha = published(tmp_path, PUBLISHED.replace("-JOBS = 1", "-JOBS = 4"))
    series = (
        f"commit {fix} https://example.invalid/pull/2\npatch 0001-jobs.patch\n"
        f"url {url} sha256:{sha} https://example.invalid/pull/9  # last\n"
    )
    result = run_series(tmp_path, checkout, series)
    assert result.returncode == 0, result.stderr
    assert (checkout / "setup.py").read_text() == "VERSION = '1.0'\nJOBS = 8\n"
    assert result.stdout.splitlines() == [
        f"applied commit {fix}",
        "applied patch 0001-jobs.patch",
        f"applied url {url}",
        "patch series: 3 applied",
    ]


def test_a_published_patch_out_of_order_stops_the_series_naming_it(tmp_path, checkout):
    """The published patch expects JOBS = 4, which only a later entry would make: it does not apply, the build stops."""
    (tmp_path / "patches").mkdir()
    patch_file(tmp_path / "patches", "0001-jobs.patch", "JOBS = 1", "JOBS = 4")
    url, sha = published(tmp_path, PUBLISHED.replace("-JOBS = 1", "-JOBS = 4"))
    result = run_series(
        tmp_path, checkout, f"url {url} sha256:{sha} https://example.invalid/pull/9\npatch 0001-jobs.patch\n"
    )
    assert result.returncode == 1
    assert f"url {url} does not apply to the source at" in result.stderr
    assert "JOBS = 1" in (checkout / "setup.py").read_text()
