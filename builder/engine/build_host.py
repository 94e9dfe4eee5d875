"""What a build can use and what it used on the building host: the engine's memory and CPUs, and the host's memory
in use while a build runs.

`engine_resources` asks the Docker engine (`docker info`: MemTotal, NCPU), so a Docker Desktop VM or a remote
engine is measured where the build runs. `MemorySampler` reads this host's /proc/meminfo (MemTotal -
MemAvailable) in a thread: the memory in use on the machine, the build's and everything else's. Nothing here
prints.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path

import docker.errors

from builder.engine.docker import EngineUnavailable, docker_client

MEMINFO = Path("/proc/meminfo")
_FIELD = re.compile(r"^(MemTotal|MemAvailable):\s+(\d+) kB$", re.M)


@dataclass(frozen=True)
class EngineResources:
    memory_bytes: int
    cpus: int


def engine_resources() -> EngineResources:
    """The memory and CPUs of the machine (or VM) the Docker engine builds on; EngineUnavailable without one."""
    try:
        info = docker_client().info()
    except docker.errors.DockerException as exc:
        raise EngineUnavailable(f"the Docker engine did not say its memory and CPUs ({exc})") from exc
    memory, cpus = info.get("MemTotal"), info.get("NCPU")
    if not isinstance(memory, int) or not isinstance(cpus, int) or memory <= 0 or cpus <= 0:
        raise EngineUnavailable(f"the Docker engine reports MemTotal={memory!r} NCPU={cpus!r}: not a machine")
    return EngineResources(memory, cpus)


def memory_in_use(meminfo: Path = MEMINFO) -> tuple[int, int] | None:
    """(bytes in use = MemTotal - MemAvailable, MemTotal bytes) of this host; None where /proc/meminfo lacks them."""
    try:
        fields = dict(_FIELD.findall(meminfo.read_text()))
    except OSError:
        return None
    if "MemTotal" not in fields or "MemAvailable" not in fields:
        return None
    total, available = int(fields["MemTotal"]) * 1024, int(fields["MemAvailable"]) * 1024
    return max(0, total - available), total


@dataclass(frozen=True)
class MemoryPeak:
    start_bytes: int
    peak_bytes: int
    total_bytes: int
    samples: int
    interval_s: float


class MemorySampler:
    """Samples the host's memory in use every `interval_s` from `start()` to `stop()`, which returns the start and
    peak (None where /proc/meminfo cannot be read)."""

    def __init__(self, interval_s: float = 1.0, meminfo: Path = MEMINFO):
        self.interval_s = interval_s
        self._meminfo = meminfo
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._first: tuple[int, int] | None = None
        self._peak = 0
        self._samples = 0

    def _sample(self) -> None:
        seen = memory_in_use(self._meminfo)
        if seen is None:
            return
        self._first = self._first or seen
        self._peak = max(self._peak, seen[0])
        self._samples += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def start(self) -> "MemorySampler":
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="envbuild-memory-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> MemoryPeak | None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        if self._first is None:
            return None
        return MemoryPeak(self._first[0], self._peak, self._first[1], self._samples, self.interval_s)
