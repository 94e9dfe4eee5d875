"""Build a rendered context with BuildKit: stream progress, keep the full log, classify failures.

Progress is told as events (`notify`: Skipped, Building, StepRunning, StepFinished, BuildEnded, Built, Pushed, ...),
each carrying plain text as BuildKit or the registry wrote it; the CLI renders them (builder.cli.build_view).

The build contract the templates implement (docs/render.md): a top-level `ARG TORCH_INDEX_URL`,
a `wheelhouse/` dir in the context used with `--find-links`, the CA as BuildKit secret
`envbuild_ca`, proxies as the predefined HTTP(S)_PROXY/NO_PROXY build args.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import docker.errors

from builder.engine.build_log import BuildFailure, PlainLog, Vertex, diagnose
from builder.engine.docker import BuildTool, detect_build_tool, docker_client
from builder.interrupt import describe
from builder.plan.context import CONTEXT_HASH_LABEL
from builder.plan.wheelhouse import WheelhouseError, check as check_wheelhouse

#: Label holding the context's manifest.json (compact JSON); run and the matrix read it back.
MANIFEST_LABEL = "org.envbuild.manifest"
CA_SECRET_ID = "envbuild_ca"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


@dataclass(frozen=True)
class BuildOptions:
    """How to build, beyond what the context pins (none of it changes the image's content hash)."""

    network: str | None = None  # "host" where the default bridge has no route out
    ca_cert: Path | None = None  # corporate proxy CA, mounted as a BuildKit secret only
    wheelhouse: Path | None = None  # the context's wheelhouse/ holds these wheels: no torch index
    cache_from: tuple[str, ...] = ()
    cache_to: tuple[str, ...] = ()
    force: bool = False  # build even when the tag exists locally
    reuse_remote: bool = False  # pull the tag from its registry when it exists there, instead of building
    no_cache: bool = False  # ignore BuildKit's cache (a cold build)
    build_args: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BuildOutcome:
    tag: str
    skipped: bool
    seconds: float
    log_path: Path | None
    tool: str
    image_id: str | None


@dataclass(frozen=True)
class RemoteLooked:
    """`reuse_remote`: the tag was looked up in its registry and pulled (`pulled`), or could not be (`why`)."""

    tag: str
    pulled: bool
    why: str = ""


@dataclass(frozen=True)
class Skipped:
    """The tag exists already (`where`: "locally" or "in the registry (pulled)") as image `image_id`: no build."""

    tag: str
    where: str
    image_id: str


@dataclass(frozen=True)
class Building:
    """BuildKit starts (`tool`: which client) writing its full log to `log_path`; a BuildEnded follows, always."""

    tag: str
    tool: str
    log_path: Path


@dataclass(frozen=True)
class StepRunning:
    """A step of the build is running: its name and its last output line so far (None: none yet), as BuildKit
    wrote them."""

    step: str
    last: str | None


@dataclass(frozen=True)
class StepFinished:
    """A step of the build finished, or was taken from BuildKit's cache (`cached`); told once per step."""

    step: str
    cached: bool


@dataclass(frozen=True)
class BuildEnded:
    """The build client exited (built, failed or stopped): what Building began is over."""


@dataclass(frozen=True)
class Built:
    tag: str
    seconds: float


@dataclass(frozen=True)
class Pushing:
    tag: str


@dataclass(frozen=True)
class Pushed:
    tag: str


def _ignore_event(event: object) -> None:
    """The `notify` of a build nobody watches (tests and fixtures building an image)."""


class BuildError(RuntimeError):
    """The build could not run or failed; `failure` says where and why when BuildKit ran."""

    def __init__(self, message: str, failure: BuildFailure | None = None, log_path: Path | None = None):
        super().__init__(message)
        self.failure = failure
        self.log_path = log_path


class BuildInterrupted(BuildError):
    """Ctrl-C or SIGTERM during the build; BuildKit was stopped and nothing was tagged."""


def default_log_path(context_dir: Path) -> Path:
    """`<context>.build.log` next to the context, so the log never becomes part of the build context."""
    context_dir = Path(context_dir).resolve()
    return context_dir.parent / f"{context_dir.name}.build.log"


def build_command(
    tool: BuildTool, context_dir: Path, tag: str, options: BuildOptions, labels: dict[str, str]
) -> list[str]:
    """The BuildKit command line (secrets and proxy values are referenced, never spelled out)."""
    argv = [*tool.argv, "--progress=plain", "--tag", tag]
    if tool.kind == "buildx":
        argv.append("--load")  # the image must land in the local engine for skip checks and runs
    if options.no_cache:
        argv.append("--no-cache")
    if options.network:
        argv += ["--network", options.network]
    if options.ca_cert:
        argv += ["--secret", f"id={CA_SECRET_ID},src={Path(options.ca_cert).resolve()}"]
    build_args = dict(options.build_args)
    if options.wheelhouse:
        build_args.setdefault("TORCH_INDEX_URL", "")  # wheels come from the wheelhouse, not an index
    for name, value in sorted(build_args.items()):
        argv += ["--build-arg", f"{name}={value}"]
    for name in PROXY_VARS:  # value taken from our environment by the client: never on the command line
        if os.environ.get(name):
            argv += ["--build-arg", name]
    for ref in options.cache_from:
        argv += ["--cache-from", ref]
    for ref in options.cache_to:
        if tool.kind == "buildx":
            argv += ["--cache-to", ref]
        elif ref.replace(" ", "") == "type=inline":
            argv += ["--build-arg", "BUILDKIT_INLINE_CACHE=1"]
        else:
            raise BuildError(
                f"--cache-to {ref}: needs docker buildx ({tool.describe} has no --cache-to); "
                "install buildx or use --cache-to type=inline"
            )
    for key, value in sorted(labels.items()):
        argv += ["--label", f"{key}={value}"]
    argv.append(str(Path(context_dir).resolve()))
    return argv


def read_verify(tag: str) -> dict | None:
    """The image's own verify record (/opt/envbuild/verify.json, written at the end of its build), if any."""
    try:
        raw = docker_client().containers.run(
            tag, ["cat", "/opt/envbuild/verify.json"], entrypoint=[], remove=True, network_mode="none", stderr=False
        )
        return json.loads(raw)
    except (docker.errors.APIError, docker.errors.ContainerError, ValueError):
        return None


def pull_existing(tag: str) -> tuple[str | None, str]:
    """(image id, "") when the registry of `tag` has it (now pulled), else (None, why not)."""
    repository, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    try:
        return docker_client().images.pull(repository, tag=version).id, ""
    except docker.errors.NotFound:
        return None, "not in the registry"
    except docker.errors.APIError as exc:
        return None, str(exc.explanation or exc).splitlines()[0][:200]


_FROM_DIGEST = re.compile(r"^#\d+ \[[^\]]*\] FROM \S+@(sha256:[0-9a-f]{64})", re.M)


def base_digest(base_image: str | None, log_path: Path | None) -> str | None:
    """The digest of the FROM image a build used: pinned in the reference, printed by BuildKit in the
    log, or the id of the local image; None when none is known (e.g. the base could not be found)."""
    if not base_image:
        return None
    if "@sha256:" in base_image:
        return base_image.rsplit("@", 1)[1]
    if log_path and Path(log_path).is_file():
        found = _FROM_DIGEST.search(Path(log_path).read_text(errors="replace"))
        if found:
            return found.group(1)
    try:
        return image_exists(base_image)
    except docker.errors.APIError:
        return None


def image_exists(tag: str) -> str | None:
    """The local image id of `tag`, or None."""
    try:
        return docker_client().images.get(tag).id
    except docker.errors.ImageNotFound:
        return None


def build_image(
    context_dir: Path,
    tag: str,
    options: BuildOptions = BuildOptions(),
    notify: Callable[[object], None] = _ignore_event,
    log_path: Path | None = None,
    manifest: dict | None = None,
) -> BuildOutcome:
    """Build the rendered context `context_dir` (its Dockerfile there, any --ca-cert a file: the caller checked)
    as `tag` unless that tag already exists locally. `manifest` (the plan's, as rendered; None for a context
    without one) goes into the image's labels and says which wheels the context's wheelhouse must hold. What
    happens is told to `notify` as it happens (the events above)."""
    context_dir = Path(context_dir)
    client = docker_client()
    tool = detect_build_tool()
    started = time.monotonic()
    existing, where = (None, "") if options.force else (image_exists(tag), "locally")
    if existing is None and options.reuse_remote and not options.force:
        existing, why = pull_existing(tag)
        where = "in the registry (pulled)"
        notify(RemoteLooked(tag, existing is not None, why))
    if existing:
        notify(Skipped(tag, where, existing))
        outcome = BuildOutcome(tag, True, time.monotonic() - started, None, tool.describe, existing)
    else:
        labels = {}
        if manifest is not None:
            try:
                check_wheelhouse(context_dir, manifest)
            except WheelhouseError as exc:
                raise BuildError(str(exc)) from exc
            labels[MANIFEST_LABEL] = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
            if manifest.get("context_hash"):
                labels[CONTEXT_HASH_LABEL] = str(manifest["context_hash"])
        log_path = Path(log_path) if log_path else default_log_path(context_dir)
        argv = build_command(tool, context_dir, tag, options, labels)
        notify(Building(tag, tool.describe, log_path))
        try:
            _run_build(argv, tool, log_path, notify)
        finally:
            notify(BuildEnded())
        image_id = client.images.get(tag).id
        outcome = BuildOutcome(tag, False, time.monotonic() - started, log_path, tool.describe, image_id)
        notify(Built(tag, outcome.seconds))
    return outcome


def _is_step(vertex: Vertex) -> bool:
    return (
        vertex.name.startswith("[") and not vertex.name.startswith("[internal]") or vertex.name.startswith("exporting")
    )


def _run_build(argv: list[str], tool: BuildTool, log_path: Path, notify: Callable[[object], None]) -> None:
    """Run the build, teeing its plain output to `log_path` and telling its steps to `notify`; raise BuildError with
    a diagnosis on failure."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = PlainLog()
    reported: set[int] = set()
    env = {**os.environ, **tool.env}
    with open(log_path, "w", encoding="utf-8", buffering=1) as sink:
        sink.write(
            f"# builder: {tool.describe}\n$ " + " ".join([*(f"{k}={v}" for k, v in tool.env.items()), *argv]) + "\n"
        )
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            env=env,
            start_new_session=True,
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                sink.write(line)
                vertex = log.feed(line)
                if vertex is None or not _is_step(vertex):
                    continue
                if vertex.state == "running":
                    notify(StepRunning(vertex.name, vertex.output[-1] if vertex.output else None))
                elif vertex.number not in reported and vertex.state in ("done", "cached"):
                    reported.add(vertex.number)
                    notify(StepFinished(vertex.name, vertex.state == "cached"))
            returncode = proc.wait()
        except KeyboardInterrupt as exc:
            how = describe(exc)
            sink.write(f"\n# interrupted ({how}); stopping the build client\n")
            _stop_build_client(proc)
            sink.write(f"# build stopped ({how}); nothing was tagged\n")
            raise BuildInterrupted(f"build interrupted ({how}); nothing was tagged", log_path=log_path) from exc
    if returncode != 0:
        failure = diagnose(log)
        raise BuildError(
            f"build failed at step {failure.step!r} ({failure.failure_class})", failure=failure, log_path=log_path
        )


def _stop_build_client(proc: subprocess.Popen) -> None:
    """Stop the build client (its own session, so signal it explicitly): SIGINT, then SIGKILL."""
    for sig, wait_s in ((signal.SIGINT, 15), (signal.SIGKILL, 5)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait_s)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            continue


class PushError(RuntimeError):
    """The registry refused or could not be reached; the image stays built locally."""


def push_image(tag: str, notify: Callable[[object], None]) -> None:
    """Push `tag` to its registry (told: Pushing, then Pushed), failing clearly on the first error the engine
    reports."""
    repository, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    notify(Pushing(tag))
    hint = "log in with `docker login <registry>`; the tag's registry part (--registry) says where it goes"
    try:
        for event in docker_client().images.push(repository, tag=version, stream=True, decode=True):
            if "error" in event:
                raise PushError(f"push of {tag} failed: {event['error']} ({hint})")
    except docker.errors.APIError as exc:
        raise PushError(f"push of {tag} failed: {exc.explanation or exc} ({hint})") from exc
    notify(Pushed(tag))
