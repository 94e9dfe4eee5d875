#!/usr/bin/env python3
"""Try envbuild's no-engine suite against the newest releases on PyPI, and say which package broke what.

Not part of .ci/run: a new upstream release must never block landing. It
  1. makes a fresh venv with the newest releases of everything `.[workload,test]` needs (torch stays at
     ENVBUILD_DEV_TORCH, the CPU wheel, as in the locked venv),
  2. lists each distribution whose version differs from requirements-dev.lock,
  3. runs the suite's no-engine tests there (`-m "not docker"`; skipped when nothing differs), and
  4. runs the failures again unchanged (one that passes was flaky, not broken by a release), then for each
     failing test puts one changed distribution back at its locked version at a time and re-runs the failures:
     a test that passes again was broken by that distribution's new release.
Run: python3 .ci/newest_releases.py [--venv DIR] [-- extra pytest args]. Exit 0 when the suite passes on the
newest releases, 1 when something broke (the table says what), 2 when the venv could not be made.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements-dev.lock"
TORCH = os.environ.get("ENVBUILD_DEV_TORCH", "2.13.0")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^ ;\\]+)(?:\s*;\s*([^\\]+?))?\s*\\?$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_versions(lock: Path = LOCK, python: tuple[int, int] = sys.version_info[:2]) -> dict[str, str]:
    """{distribution: version} of the lock for this Python (the lock is universal: a few lines carry a
    python_full_version marker, evaluated here)."""
    pins = {}
    for line in lock.read_text().splitlines():
        match = _PIN.match(line.strip())
        if not match:
            continue
        name, version, marker = match.groups()
        if marker and not _python_marker_holds(marker, python):
            continue
        pins[canonical(name)] = version
    return pins


def _python_marker_holds(marker: str, python: tuple[int, int]) -> bool:
    """Evaluate a PEP 508 marker with the `packaging` library (pip vendors it)."""
    from pip._vendor.packaging.markers import Marker

    return Marker(marker).evaluate(
        {
            "python_full_version": ".".join(map(str, python)) + ".0",
            "python_version": ".".join(map(str, python)),
            "sys_platform": sys.platform,
            "platform_machine": os.uname().machine,
            "platform_system": os.uname().sysname,
        }
    )


def installed_versions(python: Path) -> dict[str, str]:
    freeze = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"], check=True, capture_output=True, text=True
    ).stdout
    return {canonical(n): v for n, v in (line.split("==", 1) for line in freeze.splitlines() if "==" in line)}


def changed(locked: dict[str, str], newest: dict[str, str]) -> dict[str, tuple[str, str]]:
    """{distribution: (locked, newest)} for each locked distribution whose newest release differs."""
    return {
        name: (locked[name], newest[name]) for name in sorted(locked) if name in newest and newest[name] != locked[name]
    }


def _pytest(python: Path, args: list[str], report: Path) -> set[str]:
    """Node ids of the failed tests (from pytest's short summary)."""
    env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # envbuild, hadolint
    proc = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    report.write_text(proc.stdout + proc.stderr)
    return {line.split()[1] for line in proc.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))}


def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "-q", *args], check=True, cwd=ROOT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=ROOT / ".envbuild" / "newest-venv")
    parser.add_argument("pytest_args", nargs="*", default=["-m", "not docker"])
    args = parser.parse_args()
    python = args.venv / "bin" / "python"
    try:
        venv.create(args.venv, with_pip=True, clear=True)
        _pip(python, f"torch=={TORCH}", "--upgrade", "-e", ".[workload,test]")
    except (subprocess.CalledProcessError, OSError) as exc:
        print(f"newest_releases: could not make the venv: {exc}", file=sys.stderr)
        return 2
    diff = changed(locked_versions(), installed_versions(python))
    print(f"newest_releases: {len(diff)} distribution(s) newer than requirements-dev.lock")
    for name, (old, new) in diff.items():
        print(f"  {name}: {old} -> {new}")
    if not diff:
        print("newest_releases: the newest releases are the locked ones: .ci/run's suite already tried them")
        return 0
    logs = args.venv / "reports"
    logs.mkdir(exist_ok=True)
    failed = _pytest(python, args.pytest_args, logs / "newest.txt")
    print(f"newest_releases: the suite on the newest releases: {len(failed)} failed (log: {logs / 'newest.txt'})")
    if not failed:
        return 0
    flaky = failed - _pytest(python, sorted(failed), logs / "newest-again.txt")  # the same releases, run again
    for test in sorted(flaky):
        print(f"  {test}: passed when run again with the same releases (flaky or load-dependent, not a release)")
    failed -= flaky
    if not failed:
        return 0
    blame: dict[str, list[str]] = {}
    for name, (old, new) in diff.items():
        _pip(python, "--no-deps", f"{name}=={old}")
        fixed = failed - _pytest(python, sorted(failed), logs / f"with-locked-{name}.txt")
        _pip(python, "--no-deps", f"{name}=={new}")
        for test in fixed:
            blame.setdefault(test, []).append(f"{name} {old} -> {new}")
    for test in sorted(failed):
        print(
            f"  {test}: "
            + (
                ", ".join(blame[test])
                if test in blame
                else "no single distribution (a combination, or it fails with the lock too)"
            )
        )
    return 1


if __name__ == "__main__":
    sys.exit(main())
