"""Same tag => same content: build a context twice with no cache and compare the two images file by file
(content, type, mode, owner, symlink/hard-link target).

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
    """Two no-cache builds of one context and how their filesystems differ."""

    tags: tuple[str, str]
    seconds: tuple[float, float]
    paths: int  # paths in the first image
    differences: list[Difference]
    contents: tuple[Contents | None, Contents | None] = (None, None)  # each image's packages, read inside it
    contents_error: str | None = None  # why they could not be read
    sbom: dict | None = None  # the two SBOMs compared (set by the build workflow): identical, sha256, components

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
            "sbom": self.sbom,
            "tags": list(self.tags),
            "build_seconds": [round(s, 1) for s in self.seconds],
            "paths": self.paths,
            "differing": len(self.differences),
            "counted": len(self.counted),
            "differences": [{"path": d.path, "what": d.what, "allowed": d.allowed} for d in self.differences],
        }


def check_reproducible(
    context_dir: Path,
    tag: str,
    options: BuildOptions,
    notify: Callable[[object], None],
    log_path: Path,
    manifest: dict | None,
) -> ReproReport:
    """Build `context_dir` twice with no cache under two temporary tags, compare their files, read their packages
    (for the SBOMs the workflow compares), remove both images. `notify` is told each build's events
    (builder.engine.build) and a line before each image's filesystem is read."""
    suffix = secrets.token_hex(3)
    tags = (f"{tag}-repro-{suffix}-1", f"{tag}-repro-{suffix}-2")
    options = replace(options, force=True, no_cache=True)
    seconds, entries, contents, error = [], [], [], None
    try:
        for n, build_tag in enumerate(tags, 1):
            outcome = build_image(
                context_dir,
                build_tag,
                options,
                notify,
                log_path.with_name(f"{log_path.stem}.{n}{log_path.suffix}"),
                manifest,
            )
            seconds.append(outcome.seconds)
        for build_tag in tags:
            notify(f"reading the filesystem of {build_tag}")
            entries.append(image_entries(build_tag))
            try:
                contents.append(read_contents(build_tag))
            except ContentsError as exc:
                contents.append(None)
                error = str(exc)
    finally:
        client = docker_client()
        for build_tag in tags:
            try:
                client.images.remove(build_tag, force=True)
            except docker.errors.APIError:  # not built (an earlier failure), or already gone
                pass
    return ReproReport(tags, (seconds[0], seconds[1]), len(entries[0]), compare(*entries), tuple(contents), error)
