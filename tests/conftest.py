"""Shared fixtures for tests that need a real Docker engine.

Without a reachable engine those tests are skipped, except when ENVBUILD_REQUIRE_DOCKER=1 (as .ci/run
sets): then they fail, so CI can never pass by skipping them.
"""

from __future__ import annotations

import os

import docker.errors
import pytest

from builder.engine import EngineUnavailable, docker_client

LOCAL_BASE = "envbuild-local/debian:bookworm"
REQUIRE_DOCKER = os.environ.get("ENVBUILD_REQUIRE_DOCKER") == "1"


def _unavailable(reason: str):
    if REQUIRE_DOCKER:
        pytest.fail(f"ENVBUILD_REQUIRE_DOCKER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_engine():
    """An SDK client of the running engine (skip, or fail under ENVBUILD_REQUIRE_DOCKER=1, without one)."""
    try:
        return docker_client(timeout=300)
    except EngineUnavailable as exc:
        _unavailable(str(exc))


@pytest.fixture(scope="session")
def local_base(docker_engine) -> str:
    """The registry-free base image made by .ci/local_base_image.sh."""
    try:
        docker_engine.images.get(LOCAL_BASE)
    except docker.errors.ImageNotFound:
        _unavailable(f"no {LOCAL_BASE} image: run `bash .ci/local_base_image.sh`")
    return LOCAL_BASE
