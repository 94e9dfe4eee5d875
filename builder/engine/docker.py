"""The Docker engine as envbuild sees it: an SDK client for queries and runs, a CLI for BuildKit builds.

The docker Python SDK has no BuildKit, so builds go through a docker *client binary*:
`docker buildx build` where buildx is installed, else a client whose `DOCKER_BUILDKIT=1 docker build`
is BuildKit (clients before 23.0 carry it built in; newer ones without buildx refuse).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors

#: Tried after every `docker` on PATH: Debian's docker.io client (BuildKit built in).
_FALLBACK_CLIENTS = ("/usr/bin/docker",)


class EngineUnavailable(RuntimeError):
    """No Docker engine answers, or no client can drive BuildKit."""


def docker_client(timeout: int = 120) -> docker.DockerClient:
    """An SDK client for the engine of DOCKER_HOST (default socket), verified with a ping."""
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except docker.errors.DockerException as exc:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise EngineUnavailable(
            f"no Docker engine answers at {host} ({_last_line(exc)}). {start_hint()} Without Docker: "
            "`envbuild run workload --local` (this Python, CPU) or `--apptainer SIF` (HPC, docs/hpc.md)."
        ) from exc
    return client


def start_hint(os_release: Path = Path("/etc/os-release")) -> str:
    """How to get an engine running on this OS (from os-release's ID / ID_LIKE)."""
    if sys.platform == "darwin":
        return "Start Docker Desktop (or `colima start`)."
    try:
        fields = dict(line.split("=", 1) for line in os_release.read_text().splitlines() if "=" in line)
    except OSError:
        fields = {}
    family = " ".join(fields.get(k, "").strip('"') for k in ("ID", "ID_LIKE")).split()
    if {"debian", "ubuntu"} & set(family):
        install = "sudo apt-get install docker.io"
    elif {"fedora", "rhel", "centos"} & set(family):
        install = "sudo dnf install moby-engine (Fedora) or docker-ce from Docker's repository (RHEL)"
    else:
        install = "install Docker Engine with your package manager"
    return (
        f"Start it with `sudo systemctl start docker` (not installed? {install}); without root, use rootless "
        "Docker (`dockerd-rootless-setuptool.sh install`) and set DOCKER_HOST as it says."
    )


@dataclass(frozen=True)
class BuildTool:
    """A docker client that builds with BuildKit: `argv` + context dir is a build command."""

    docker: str  # path of the client binary
    kind: str  # "buildx" | "docker-build"
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def describe(self) -> str:
        how = "docker buildx build" if self.kind == "buildx" else "DOCKER_BUILDKIT=1 docker build"
        return f"{how} ({self.docker})"


def _docker_clients() -> list[str]:
    """Docker clients to try: $ENVBUILD_DOCKER alone when set, else every `docker` on PATH, then fallbacks."""
    if os.environ.get("ENVBUILD_DOCKER"):
        return [os.environ["ENVBUILD_DOCKER"]]
    found: list[str] = []
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        path = Path(directory or ".") / "docker"
        if path.is_file() and os.access(path, os.X_OK):
            found.append(str(path.resolve()))
    found += [c for c in _FALLBACK_CLIENTS if Path(c).is_file()]
    return list(dict.fromkeys(found))


def _run_quietly(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})}, check=False
    )


@functools.lru_cache(maxsize=None)
def detect_build_tool() -> BuildTool:
    """The client to build with: one with buildx if any, else one whose `docker build` is BuildKit."""
    candidates = _docker_clients()
    for client in candidates:
        if _run_quietly([client, "buildx", "version"]).returncode == 0:
            return BuildTool(client, "buildx", (client, "buildx", "build"))
    for client in candidates:
        probe = _run_quietly([client, "build", "--help"], {"DOCKER_BUILDKIT": "1"})
        if probe.returncode == 0 and "--secret" in probe.stdout:
            return BuildTool(client, "docker-build", (client, "build"), {"DOCKER_BUILDKIT": "1"})
    tried = ", ".join(candidates) or "none found on PATH"
    raise EngineUnavailable(
        f"no docker client can build with BuildKit (tried: {tried}). Install the buildx plugin "
        "(docker-buildx-plugin or docker-buildx), or point ENVBUILD_DOCKER at a client that has it."
    )


def _last_line(exc: Exception) -> str:
    """The last line of an error's message, at most 200 characters (its type's name when the message is empty)."""
    text = str(exc).strip().splitlines()
    return text[-1][:200] if text else type(exc).__name__
