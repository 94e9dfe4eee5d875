"""images/common/install_os_packages.sh with the release's apt pins, run for real as root in a container.

repo.radeon.com cannot be reached here, so the container's only apt source is a local repository made by the test:
real .deb packages (dpkg-deb) in two builds of a made-up ROCm release, the newer build (67) beside the pinned one
(66), as a respin of the repository would leave them. The script must install the pinned build's version, an
exact pin exactly, an unpinned package at the newest version, and stop naming the package when the pinned build
is missing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from builder.paths import IMAGES_DIR

pytestmark = [pytest.mark.docker, pytest.mark.slow]
DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
BUILD = "60200-66~22.04"
PACKAGES = {
    "rocm-dev": ["6.2.0.60200-66~22.04", "6.2.0.60200-67~22.04"],
    "rocm-llvm-dev": ["18.0.0.24292.60200-66~22.04", "18.0.0.24292.60200-67~22.04"],
    "rocm-libs": ["6.2.0.60200-67~22.04"],  # the pinned build is gone from the repository
    "libfoo-dev": ["1.0-1", "1.1-1"],  # not a ROCm package: installed at what the repository serves
}


@pytest.fixture(scope="module")
def apt_repo(tmp_path_factory) -> Path:
    """A flat apt repository (Packages index made by dpkg-scanpackages) of empty packages."""
    repo = tmp_path_factory.mktemp("apt-repo")
    for name, versions in PACKAGES.items():
        for version in versions:
            root = repo / "src" / f"{name}-{version}"
            (root / "DEBIAN").mkdir(parents=True)
            (root / "DEBIAN" / "control").write_text(
                f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: test <t@invalid>\n"
                f"Description: made by the test\n"
            )
            subprocess.run(
                ["dpkg-deb", "--build", "--root-owner-group", str(root), str(repo / f"{name}_{version}_all.deb")],
                check=True,
                capture_output=True,
            )
    index = subprocess.run(["dpkg-scanpackages", "--multiversion", "."], cwd=repo, check=True, capture_output=True)
    (repo / "Packages").write_bytes(index.stdout)
    for path in [repo, *repo.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return repo


def _install(base: str, repo: Path, **env: str) -> subprocess.CompletedProcess:
    setup = (
        "rm -f /etc/apt/sources.list.d/* && echo 'deb [trusted=yes] file:/repo ./' > /etc/apt/sources.list && "
        "bash /opt/envbuild/common/install_os_packages.sh"
    )
    args = [f"--env={key}={value}" for key, value in env.items()]
    return subprocess.run(
        [
            DOCKER,
            "run",
            "--rm",
            "--network",
            "none",
            "--label",
            "io.envbuild.test=apt-pins",
            *args,
            "-v",
            f"{repo}:/repo:ro",
            "-v",
            f"{IMAGES_DIR / 'common'}:/opt/envbuild/common:ro",
            base,
            "bash",
            "-c",
            setup,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_pinned_packages_install_at_the_pinned_build_and_exact_pins_exactly(local_base, apt_repo):
    proc = _install(
        local_base,
        apt_repo,
        OS_PACKAGES="rocm-dev rocm-llvm-dev=18.0.0.24292.60200-66~22.04 libfoo-dev",
        ROCM_APT_BUILD=BUILD,
        ROCM_APT_BUILD_PACKAGES="rocm-dev rocm-llvm-dev",
    )
    assert proc.returncode == 0, proc.stderr
    installed = sorted(line for line in proc.stdout.splitlines() if line.startswith("installed "))
    assert installed == [
        "installed libfoo-dev=1.1-1",  # unpinned: the newest
        "installed rocm-dev=6.2.0.60200-66~22.04",  # build 66 although 67 is newer
        "installed rocm-llvm-dev=18.0.0.24292.60200-66~22.04",
    ]


def test_without_a_pin_the_newest_build_is_what_apt_takes(local_base, apt_repo):
    """The control: the same repository with no pin installs the respin, which is what the pin prevents."""
    proc = _install(local_base, apt_repo, OS_PACKAGES="rocm-dev")
    assert proc.returncode == 0, proc.stderr
    assert "installed rocm-dev=6.2.0.60200-67~22.04" in proc.stdout


def test_a_pinned_package_missing_from_the_pinned_build_stops_the_step_naming_it(local_base, apt_repo):
    proc = _install(
        local_base,
        apt_repo,
        OS_PACKAGES="rocm-dev rocm-libs",
        ROCM_APT_BUILD=BUILD,
        ROCM_APT_BUILD_PACKAGES="rocm-dev rocm-libs",
    )
    assert proc.returncode != 0
    assert (
        f"rocm-libs: expected one version of repository build {BUILD}, found: none (offered: 6.2.0.60200-67~22.04 )"
        in proc.stderr
    )
    assert "installed " not in proc.stdout
