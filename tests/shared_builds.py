"""Images both lanes of the Docker tests build (`-m "docker and second_lane"` and `-m "docker and not second_lane"`,
two pytest processes side by side in .ci/run; tests/conftest.py): one process builds at a time, so the other finds
that build cached instead of building the same image beside it on the same cores."""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from typing import Iterator

import pytest


@contextmanager
def one_build_at_a_time(tmp_path_factory: pytest.TempPathFactory, image: str) -> Iterator[None]:
    """Hold the lock named `image` while the block builds it: a file in the folder that holds every pytest session's
    temporary folder (each lane is a session of its own; a pytest-xdist worker's folder is one level further down)."""
    root = tmp_path_factory.getbasetemp().parent
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    with open(root / f"envbuild-build-{image}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
