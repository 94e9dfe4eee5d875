"""Shared fixtures for tests that need a real Docker engine.

Without a reachable engine those tests are skipped, except when ENVBUILD_REQUIRE_DOCKER=1 (as .ci/run
sets): then they fail, so CI can never pass by skipping them.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import docker.errors
import pytest
from repo import LOCAL_BASE

from builder.engine.docker import EngineUnavailable, docker_client

REQUIRE_DOCKER = os.environ.get("ENVBUILD_REQUIRE_DOCKER") == "1"

# The README's test command is `.venv/bin/python -m pytest`, with the venv not activated: the programs the tests
# start (ci/scripts/*.sh call `envbuild`, the render lint calls `hadolint`) are the ones installed beside this Python.
_BIN = str(Path(sys.executable).parent)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = os.pathsep.join(filter(None, (_BIN, os.environ.get("PATH"))))

# Tests run side by side (pytest-xdist's workers, CI's two Docker lanes), each starting torch processes: with torch's
# default of a thread per core in every one of them the cores are oversubscribed and its OpenMP threads wait on each
# other (the tests without an engine: 599 s on this project's 2-core VM, 464 s with one thread each). One thread per
# process unless the caller chose otherwise; processes the tests start inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# A test run started as a background job (`cmd &` in a script) inherits SIGINT ignored, and so would every
# process the tests start (an ignored signal survives exec): the Ctrl-C tests need what a terminal gives.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _stop_signals_handed_back():
    """A command stopped in this process leaves Ctrl-C and SIGTERM ignored (its process is about to exit: see
    builder.interrupt.stop_signals); the next test gets the handlers this one started with."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in before.items():
        if signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)


def pytest_collection_modifyitems(items):
    """A test that needs the engine (through any fixture) is a `docker` test, marked or not: .ci/run runs
    `-m "not docker"` before the engine starts and `-m docker` after, so each test runs in its phase. A test that
    uses the cluster (tests/hpc_fixtures.py) is marked `hpc`; an `hpc` test runs in the `second_lane`, and a
    `second_lane` test is a docker test. .ci/run runs the docker tests in two processes side by side,
    `-m "docker and second_lane"` and `-m "docker and not second_lane"`: the second lane's tests start no container
    that the first lane's checks count (label org.envbuild.run) and the first lane's no Slurm job or SIF; an image both
    lanes need is built once (tests/shared_builds.py)."""
    for item in items:
        uses_cluster = any(getattr(v, "__module__", None) == "hpc_fixtures" for v in vars(item.module).values())
        if uses_cluster and not item.get_closest_marker("hpc"):
            raise pytest.UsageError(f"{item.nodeid} uses the cluster (tests/hpc_fixtures.py): mark its module `hpc`")
        if item.get_closest_marker("hpc"):
            item.add_marker(pytest.mark.second_lane)
        if "docker_engine" in getattr(item, "fixturenames", ()) or item.get_closest_marker("second_lane"):
            item.add_marker(pytest.mark.docker)


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


TOOLS_DOCKERFILE = """\
FROM {base}
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends git python3-pip ca-certificates \\
    >/dev/null && rm -rf /var/lib/apt/lists/*
"""


@pytest.fixture(scope="session")
def tools_image(local_base, tmp_path_factory) -> str:
    """The local base plus git, python3 and pip (~20 s cold, cached by BuildKit afterwards)."""
    from builder.engine.build import BuildOptions, build_image
    from builder.plan.render import read_manifest

    ctx = tmp_path_factory.mktemp("tools") / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(TOOLS_DOCKERFILE.format(base=local_base))
    tag = "envbuild-test/tools:1"
    build_image(ctx, tag, BuildOptions(network="host", force=True), manifest=read_manifest(ctx))
    return tag
