"""What an image holds, read from inside it: its os-release, the dpkg packages dpkg calls installed, and the Python
distributions its `python` sees (importlib.metadata, the first of a name on sys.path wins, as for the image's own
verify step, builder.plan.steps.VERIFY_SCRIPT).

One container of the image runs one fixed Python program (no network, no mounts, a bounded engine log, removed on
every path) and prints one JSON line; the host reads at most MAX_OUTPUT bytes of it within TIMEOUT_S and takes
only names and versions that are plain tokens. The image is one envbuild built; the bounds hold all the same.
"""

from __future__ import annotations

import json

import docker.errors
from docker.types import LogConfig

from builder import strict_json
from builder.engine.docker import docker_client
from builder.sbom import DPKG, PYTHON, Contents, Package, valid_token

#: The label of the reading container (tests find theirs by it).
LABEL = "org.envbuild.image-contents"
TIMEOUT_S = 180
MAX_OUTPUT = 8 << 20
MAX_PACKAGES = 50_000

#: Runs in the image as `python -c`: os-release, `dpkg-query -W`, importlib.metadata; one JSON line out.
PROGRAM = r"""
import importlib.metadata as md, json, re, subprocess
release = {}
try:
    for line in open("/etc/os-release", encoding="utf-8", errors="replace"):
        key, _, value = line.strip().partition("=")
        release[key] = value.strip().strip('"')
except OSError:
    pass
try:
    listed = subprocess.run(
        ["dpkg-query", "-W", "-f=${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\n"],
        capture_output=True, text=True, timeout=120,
    ).stdout
    dpkg = [line.split("\t")[1:] for line in listed.splitlines() if line.startswith("ii")]
except (OSError, subprocess.SubprocessError):
    dpkg = None
python = {}
for dist in md.distributions():
    name = dist.metadata["Name"]
    if name:
        python.setdefault(re.sub(r"[-_.]+", "-", name).lower(), [name, dist.version])
print(json.dumps({"os": [release.get("ID", ""), release.get("VERSION_ID", "")],
                  "dpkg": dpkg, "python": sorted(python.values())}))
"""


class ContentsError(RuntimeError):
    """The image's packages could not be read (the message says why)."""


def read_contents(tag: str, python: str = "python") -> Contents:
    """The packages of image `tag`. ContentsError when the container fails, runs past TIMEOUT_S, prints more than
    MAX_OUTPUT bytes or something that is not the program's JSON; EngineUnavailable passes through."""
    client = docker_client(timeout=TIMEOUT_S + 60)
    try:
        container = client.containers.create(
            tag,
            command=["-c", PROGRAM],
            entrypoint=[python],
            network_disabled=True,
            labels={LABEL: "1"},
            log_config=LogConfig(type=LogConfig.types.JSON, config={"max-size": "16m", "max-file": "1"}),
        )
    except docker.errors.APIError as exc:
        raise ContentsError(f"the engine cannot start a container of {tag}: {exc.explanation or exc}") from None
    try:
        container.start()
        try:
            status = container.wait(timeout=TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the SDK raises the transport's timeout types
            raise ContentsError(f"reading the packages of {tag} took longer than {TIMEOUT_S} s ({exc})") from None
        output = container.logs(stdout=True, stderr=False)
        errors = container.logs(stdout=False, stderr=True)[-2000:].decode("utf-8", "replace").strip()
    except docker.errors.APIError as exc:
        raise ContentsError(f"reading the packages of {tag} failed: {exc.explanation or exc}") from None
    finally:
        try:
            container.remove(force=True)
        except docker.errors.APIError:
            pass
    if status.get("StatusCode") != 0:
        raise ContentsError(
            f"{python} in {tag} could not list its packages (exit {status.get('StatusCode')}): {errors[-500:]}"
        )
    return parse(output, tag)


def parse(output: bytes, tag: str) -> Contents:
    """The program's JSON line as Contents; ContentsError for output that is too large or not the program's."""
    if len(output) > MAX_OUTPUT:
        raise ContentsError(f"{tag} printed {len(output)} bytes of package lists, more than {MAX_OUTPUT}")
    try:
        data = strict_json.loads(output.strip())
        os_id, os_version = data["os"]
        rows = [(DPKG, *row) for row in data["dpkg"] or []] + [
            (PYTHON, name, version, "") for name, version in data["python"]
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise ContentsError(f"{tag}: the package lists are not what the reading program prints ({exc})") from None
    if len(rows) > MAX_PACKAGES:
        raise ContentsError(f"{tag} lists {len(rows)} packages, more than {MAX_PACKAGES}")
    packages = []
    for row in rows:
        if len(row) != 4 or not all(isinstance(x, str) for x in row):
            raise ContentsError(f"{tag}: a package line is not (name, version, arch): {json.dumps(row)[:200]}")
        source, name, version, arch = row
        if not (valid_token(name) and valid_token(version) and (not arch or valid_token(arch))):
            raise ContentsError(
                f"{tag}: package {json.dumps(name)[:100]} {json.dumps(version)[:100]} is not a plain token"
            )
        packages.append(Package(source, name, version, arch))
    for value in (os_id, os_version):
        if not isinstance(value, str) or (value and not valid_token(value)):
            raise ContentsError(f"{tag}: os-release ID/VERSION_ID {json.dumps(value)[:100]} is not a plain token")
    return Contents(os_id, os_version, tuple(sorted(packages)))
