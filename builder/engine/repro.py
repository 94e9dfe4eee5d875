"""Same tag => same content: compare two images of one context file by file (content, type, mode, owner,
symlink/hard-link target). When the tag exists on the engine with this context's `io.envbuild.context-hash` label,
the two are that image (an earlier, independent execution of the same build: the tag is the content hash) and one
--no-cache rebuild under a temporary tag; otherwise (or when asked to) two --no-cache builds under temporary tags.
Only the temporary tags are ever removed.

Each image's filesystem is read from `docker export` of a created (never started) container, streamed
through `tarfile` and hashed on the fly, so nothing is written to disk. Modification times are left out:
the layer tar records each file's build-time mtime, and the BuildKit of Docker 20.10 (v0.8) cannot clamp
them (`rewrite-timestamp` needs BuildKit >= 0.13: moby/buildkit docs/build-repro.md). Every other
difference counts unless ALLOW_LIST names it (docs/docker.md, "Reproducible builds"). Each image's packages are
read too (builder.engine.image_contents), so that the workflow can compare the two images' SBOMs.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import secrets
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import docker.errors

from builder.engine.build import BuildOptions, build_image
from builder.engine.docker import docker_client
from builder.engine.image_contents import ContentsError, read_contents
from builder.plan.context import context_hash_of
from builder.sbom import Contents

#: Paths that may differ between two no-cache builds, each with the reason (mirrored in docs/docker.md).
ALLOW_LIST: dict[str, str] = {}

_TYPES = {
    tarfile.REGTYPE: "file",
    tarfile.AREGTYPE: "file",
    tarfile.DIRTYPE: "dir",
    tarfile.SYMTYPE: "symlink",
    tarfile.LNKTYPE: "hardlink",
    tarfile.CHRTYPE: "chardev",
    tarfile.BLKTYPE: "blockdev",
    tarfile.FIFOTYPE: "fifo",
}


@dataclass(frozen=True)
class Entry:
    """What is compared of one path (mtime deliberately absent)."""

    kind: str
    mode: int
    owner: str  # "uid:gid"
    size: int
    digest: str  # sha256 of a file's bytes, the target of a link, "" otherwise

    def differs(self, other: "Entry") -> list[str]:
        """The names of the fields in which `other` differs."""
        fields = ("kind", "mode", "owner", "size", "digest")
        return [f for f in fields if getattr(self, f) != getattr(other, f)]


@dataclass(frozen=True)
class Difference:
    path: str
    what: str  # "only in A", "only in B", or the differing fields ("digest, size")
    allowed: str | None  # the allow-list reason, None when the difference counts


class _Stream(io.RawIOBase):
    """A read-only file over an iterator of byte chunks (the export stream)."""

    def __init__(self, chunks):
        self._chunks, self._rest = iter(chunks), b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._rest:
            try:
                self._rest = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._rest))
        buffer[:n], self._rest = self._rest[:n], self._rest[n:]
        return n


def tar_entries(fileobj) -> dict[str, Entry]:
    """{"/path": Entry} of every member of a tar stream."""
    entries: dict[str, Entry] = {}
    with tarfile.open(fileobj=fileobj, mode="r|") as tar:
        for member in tar:
            digest = ""
            if member.isfile():
                sha = hashlib.sha256()
                source = tar.extractfile(member)
                for block in iter(lambda: source.read(1 << 20), b""):
                    sha.update(block)
                digest = sha.hexdigest()
            elif member.issym() or member.islnk():
                digest = member.linkname
            name = member.name[2:] if member.name.startswith("./") else member.name
            path = "/" + name.strip("/")
            entries[path] = Entry(
                _TYPES.get(member.type, repr(member.type)),
                member.mode,
                f"{member.uid}:{member.gid}",
                member.size if member.isfile() else 0,
                digest,
            )
    return entries


def image_entries(tag: str) -> dict[str, Entry]:
    """The filesystem of image `tag`, via `docker export` of a created, never started container."""
    client = docker_client(timeout=600)
    container = client.containers.create(tag, entrypoint=["/bin/true"], network_disabled=True)
    try:
        stream = io.BufferedReader(_Stream(container.export(chunk_size=1 << 20)), buffer_size=1 << 20)
        return tar_entries(stream)
    finally:
        try:
            container.remove(force=True)
        except docker.errors.APIError:
            pass


def allowed(path: str, allow_list: dict[str, str] = ALLOW_LIST) -> str | None:
    """The allow-list reason covering `path` (entries are fnmatch patterns), or None."""
    return next((reason for pattern, reason in allow_list.items() if fnmatch.fnmatchcase(path, pattern)), None)


def compare(a: dict[str, Entry], b: dict[str, Entry], allow_list: dict[str, str] = ALLOW_LIST) -> list[Difference]:
    """Every path whose entry differs between `a` and `b`, sorted by path."""
    diffs = []
    for path in sorted(a.keys() | b.keys()):
        if path not in b:
            what = "only in A"
        elif path not in a:
            what = "only in B"
        else:
            fields = a[path].differs(b[path])
            if not fields:
                continue
            what = ", ".join(fields)
        diffs.append(Difference(path, what, allowed(path, allow_list)))
    return diffs


@dataclass(frozen=True)
class ReproReport:
    """Two images of one context (`tags`: A and B) and how their filesystems differ: the existing image under the
    context's tag (`existing_id`) and one no-cache rebuild, or (`existing_id` None) two no-cache builds."""

    tags: tuple[str, str]
    seconds: tuple[float, ...]  # each build made: one when an existing image was compared, else two
    paths: int  # paths in image A
    differences: list[Difference]
    contents: tuple[Contents | None, Contents | None] = (None, None)  # each image's packages, read inside it
    contents_error: str | None = None  # why they could not be read
    sbom: dict | None = None  # the two SBOMs compared (set by the build workflow): identical, sha256, components
    existing_id: str | None = None  # the id of the existing image A; None: A and B are two builds
    base_logs: tuple[Path, Path] | None = None  # the build log each image's base digest is read from

    @property
    def compared(self) -> str:
        """Which two images were compared, in words."""
        if self.existing_id:
            return f"existing image {self.tags[0]} (id {self.existing_id}) against one --no-cache rebuild"
        return "two --no-cache builds"

    @property
    def counted(self) -> list[Difference]:
        """The differences no allow-list entry explains: any of them fails the check."""
        return [d for d in self.differences if d.allowed is None]

    @property
    def sboms_differ(self) -> bool:
        """Both images' SBOMs were made and are not the same bytes (an image whose packages cannot be read, one
        without Python, has none to compare: that is said, not counted)."""
        return bool(self.sbom) and self.sbom.get("identical") is False

    def to_json(self) -> dict:
        return {
            "compared": self.compared,
            "existing_image": self.existing_id,
            "sbom": self.sbom,
            "tags": list(self.tags),
            "build_seconds": [round(s, 1) for s in self.seconds],
            "paths": self.paths,
            "differing": len(self.differences),
            "counted": len(self.counted),
            "differences": [{"path": d.path, "what": d.what, "allowed": d.allowed} for d in self.differences],
        }


@dataclass(frozen=True)
class Route:
    """How the check gets its two images: `existing_id` set, the image tagged with the context's tag compared with
    one rebuild; None, two builds. `why`: the reason, in words."""

    existing_id: str | None
    why: str


def route(tag: str, context_hash: str | None, rebuild_twice: bool) -> Route:
    """One rebuild against the image tagged `tag` when it exists and its context-hash label is `context_hash`;
    else two builds (also when `rebuild_twice`, or the context has no hash to compare)."""
    if rebuild_twice:
        return Route(None, "--rebuild-twice: the existing image is not used")
    if not context_hash:
        return Route(None, "the context's manifest names no context hash to match an existing image against")
    try:
        image = docker_client().images.get(tag)
    except docker.errors.ImageNotFound:
        return Route(None, f"no image {tag} on the engine")
    labelled = context_hash_of(image.labels)
    if labelled != context_hash:
        return Route(None, f"{tag} is labelled context hash {labelled or '(none)'}, this context's is {context_hash}")
    return Route(image.id, f"{tag} exists (id {image.id}) with this context's hash")


def check_reproducible(
    context_dir: Path,
    tag: str,
    options: BuildOptions,
    notify: Callable[[object], None],
    log_path: Path,
    manifest: dict | None,
    rebuild_twice: bool = False,
) -> ReproReport:
    """Compare two images of `context_dir` file by file and read their packages (for the SBOMs the workflow
    compares): the image tagged `tag` when its context-hash label is the manifest's (`route`) against one no-cache
    rebuild under a temporary tag, else two no-cache builds under temporary tags. Only the temporary images are
    removed, on every path. `notify` is told the route chosen (a line), each build's events (builder.engine.build)
    and a line before each image's filesystem is read."""
    chosen = route(tag, (manifest or {}).get("context_hash"), rebuild_twice)
    suffix = secrets.token_hex(3)
    if chosen.existing_id:
        notify(f"{chosen.why}: comparing it with one --no-cache rebuild")
        rebuild = f"{tag}-repro-{suffix}"
        builds = ((rebuild, log_path.with_name(f"{log_path.stem}.rebuild{log_path.suffix}")),)
        names, refs = (tag, rebuild), (chosen.existing_id, rebuild)  # read by id: the image whose label was checked
        base_logs = (builds[0][1], builds[0][1])  # the same FROM request, in the hashed Dockerfile (docs/docker.md)
    else:
        notify(f"{chosen.why}: building twice")
        builds = tuple(
            (f"{tag}-repro-{suffix}-{n}", log_path.with_name(f"{log_path.stem}.{n}{log_path.suffix}")) for n in (1, 2)
        )
        names = refs = (builds[0][0], builds[1][0])
        base_logs = (builds[0][1], builds[1][1])
    options = replace(options, force=True, no_cache=True)
    seconds, entries, contents, error = [], [], [], None
    try:
        for build_tag, build_log in builds:
            seconds.append(build_image(context_dir, build_tag, options, notify, build_log, manifest).seconds)
        for name, ref in zip(names, refs):
            notify(f"reading the filesystem of {name}")
            entries.append(image_entries(ref))
            try:
                contents.append(read_contents(ref))
            except ContentsError as exc:
                contents.append(None)
                error = str(exc)
    finally:
        _remove_images(build_tag for build_tag, _ in builds)
    return ReproReport(
        names,
        tuple(seconds),
        len(entries[0]),
        compare(*entries),
        tuple(contents),
        error,
        existing_id=chosen.existing_id,
        base_logs=base_logs,
    )


def _remove_images(tags) -> None:
    """Remove the temporary images by their tags (never by id: an image that is also tagged otherwise keeps it)."""
    client = docker_client()
    for build_tag in tags:
        try:
            client.images.remove(build_tag, force=True)
        except docker.errors.APIError:  # not built (an earlier failure), or already gone
            pass
