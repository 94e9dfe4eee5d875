"""images/common/refresh_apt_key.sh run for real in a container.

The ROCm key itself cannot be fetched here (repo.radeon.com is unreachable), so the script gets a key made
in the test, served by a file:// URL (curl reads it like https), on a Debian base with curl and gnupg as
rocm/dev-ubuntu-22.04 has them (ROCm/ROCm-docker dev/Dockerfile-ubuntu-22.04@9bb8831) and a sources list
naming repo.radeon.com with a `signed-by=` keyring plus the `apt-key add` keyring the dev images use.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from builder.paths import IMAGES_DIR

pytestmark = [pytest.mark.docker, pytest.mark.slow]
DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
CA = Path("/etc/ssl/certs/ca-certificates.crt")
DOCKERFILE = """\
FROM {base}
COPY lib.sh refresh_apt_key.sh /opt/envbuild/common/
RUN --mount=type=secret,id=envbuild_ca,required=false \\
    bash -c 'source /opt/envbuild/common/lib.sh && apt_install curl gnupg && apt_clean'
"""
ROCM_SOURCE = (
    "mkdir -p /etc/apt/keyrings && echo 'deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] "
    "https://repo.radeon.com/rocm/apt/6.2 jammy main' > /etc/apt/sources.list.d/rocm.list"
)


@pytest.fixture(scope="module")
def key_image(local_base, tmp_path_factory):
    ctx = tmp_path_factory.mktemp("apt-key-ctx")
    for name in ("lib.sh", "refresh_apt_key.sh"):
        (ctx / name).write_bytes((IMAGES_DIR / "common" / name).read_bytes())
    (ctx / "Dockerfile").write_text(DOCKERFILE.format(base=local_base))
    tag = f"envbuild-test/apt-key-22:{int(time.time() * 1000)}"
    secret = ["--secret", f"id=envbuild_ca,src={CA}"] if CA.is_file() else []
    proc = subprocess.run(
        [DOCKER, "build", "--network", "host", *secret, "-t", tag, str(ctx)],
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    yield tag
    subprocess.run([DOCKER, "rmi", "-f", tag], capture_output=True)


@pytest.fixture(scope="module")
def signing_key(tmp_path_factory) -> tuple[Path, str]:
    """An armored public key made here, and its fingerprint."""
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    subprocess.run(
        [
            "gpg",
            "--batch",
            "--passphrase",
            "",
            "--quick-gen-key",
            "envbuild test <test@invalid>",
            "rsa2048",
            "sign",
            "1d",
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    listing = subprocess.run(
        ["gpg", "--batch", "--with-colons", "--list-keys"], env=env, check=True, capture_output=True, text=True
    ).stdout
    fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    key = home.parent / "key.asc"
    key.write_text(
        subprocess.run(
            ["gpg", "--batch", "--armor", "--export", fingerprint], env=env, check=True, capture_output=True, text=True
        ).stdout
    )
    key.chmod(0o644)
    return key, fingerprint


def _run(tag: str, key: Path, fingerprint: str, setup: str, after: str = "true") -> subprocess.CompletedProcess:
    script = (
        f"{setup} && ROCM_KEY_URL=file:///key.asc ROCM_KEY_FINGERPRINT={fingerprint} "
        f"bash /opt/envbuild/common/refresh_apt_key.sh && {after}"
    )
    return subprocess.run(
        [DOCKER, "run", "--rm", "--network", "none", "-v", f"{key}:/key.asc:ro", tag, "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_key_is_checked_against_its_fingerprint_and_installed_where_apt_reads_it(key_image, signing_key):
    key, fingerprint = signing_key
    shows = "gpg --batch --show-keys --with-colons {} | grep -c {}"
    proc = _run(
        key_image,
        key,
        fingerprint,
        ROCM_SOURCE,
        " && ".join(
            shows.format(p, fingerprint) for p in ("/etc/apt/keyrings/rocm.gpg", "/etc/apt/trusted.gpg.d/rocm.gpg")
        ),
    )
    assert proc.returncode == 0, proc.stderr
    assert f"ROCm apt key {fingerprint} refreshed" in proc.stdout


def test_a_key_with_another_fingerprint_stops_the_build_and_installs_nothing(key_image, signing_key):
    key, fingerprint = signing_key
    expected = "CA8BB4727A47B4D09B4EE8969386B48A1A693C5C"  # recipes/rocm.toml's: not the test key
    proc = _run(key_image, key, expected, ROCM_SOURCE, "true")
    assert proc.returncode == 1
    assert f"has fingerprint '{fingerprint}', expected {expected}" in proc.stderr


def test_a_base_without_a_rocm_source_is_left_alone(key_image, signing_key):
    key, fingerprint = signing_key
    proc = _run(key_image, key, fingerprint, "true", "test ! -e /etc/apt/trusted.gpg.d/rocm.gpg")
    assert proc.returncode == 0, proc.stderr
    assert "no repo.radeon.com apt source" in proc.stdout
