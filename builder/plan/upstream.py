"""What upstream publishes that recipes/ lacks: torch wheels and GPU archs on a PEP 503 index, ROCm releases.

`envbuild recipes check-upstream` reads a PEP 503 "simple" index (the PyTorch ROCm indexes,
https://download.pytorch.org/whl/rocm7.2/, or AMD's per-arch indexes) and a list of ROCm release tags, and
compares them with the recipes. Everything read is untrusted: only names matching a strict grammar (a wheel
filename, a project name, a release tag) are used; links are never followed, only <index>/<project>/ pages
this module builds itself are fetched, and a redirect only on the index's own host, never from https to http
(builder.bounded_read.read_url).
"""

from __future__ import annotations

import html.parser
import re
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from builder import bounded_read
from builder.plan.recipes import Recipes, version_key

#: torch-2.11.0+rocm7.2-cp312-cp312-manylinux_2_28_x86_64.whl -> version 2.11.0, local rocm7.2
_TORCH_WHEEL = re.compile(
    r"torch-(?P<version>\d+\.\d+\.\d+)\+(?P<local>rocm\d+(?:\.\d+){0,2})-"
    r"cp\d+-cp\d+t?-(?:manylinux|linux)[A-Za-z0-9_.]*\.whl"
)
#: AMD's per-arch torch device packages (TheRock multi-arch index): amd-torch-device-gfx942
_DEVICE_PROJECT = re.compile(r"amd-torch-device-(?P<arch>gfx[0-9a-f]{3,4})")
_RELEASE_TAG = re.compile(r"\b(?:rocm|therock)-(?P<version>\d+\.\d+(?:\.\d+)?)\b")
MAX_PAGE = 8 * 1024 * 1024  # bytes read from one index page
INDEX_SECONDS = 25  # one index's pages, all of them, are read within this time however slowly a server sends


class UpstreamError(Exception):
    """An index or release list could not be read or is not what it claims to be."""


@dataclass
class Findings:
    """What the upstream sources have and the recipes lack."""

    wheels: list[str] = field(default_factory=list)  # "torch 2.12.0+rocm7.2: no torch line 2.12"
    archs: list[str] = field(default_factory=list)  # "gfx1151 (amd-torch-device-gfx1151)"
    releases: list[str] = field(default_factory=list)  # "7.3.0"

    @property
    def empty(self) -> bool:
        return not (self.wheels or self.archs or self.releases)


class _Anchors(html.parser.HTMLParser):
    """The text of every <a> element (PEP 503: the anchor text is the file or project name)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self._in_a = False

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._in_a, self._text = True, ""

    def handle_data(self, data):
        if self._in_a:
            self._text += data

    def handle_endtag(self, tag):
        if tag == "a" and self._in_a:
            self._in_a = False
            self.names.append(self._text.strip())


def read_text(location: str, deadline: float | None = None) -> str:
    """An http(s) URL, a file:// URL or a local path, at most MAX_PAGE bytes, read by builder.bounded_read
    before `deadline` (time.monotonic(); default INDEX_SECONDS from now); UpstreamError otherwise."""
    scheme = urllib.parse.urlsplit(location).scheme
    deadline = time.monotonic() + INDEX_SECONDS if deadline is None else deadline
    try:
        if scheme in ("http", "https"):
            data = bounded_read.read_url(location, MAX_PAGE, deadline)
        elif scheme in ("", "file"):
            data = bounded_read.read_file(_directory(location) or location, MAX_PAGE)
        else:
            raise UpstreamError(f"{location!r}: only http(s)://, file:// or a local path can be read")
    except (OSError, ValueError) as exc:  # BoundedReadError is a ValueError
        raise UpstreamError(f"cannot read {location}: {exc}") from None
    return data.decode("utf-8", errors="replace")


def parse_page(parser: html.parser.HTMLParser, page: str, where: str) -> None:
    """Feed `page` to `parser`; UpstreamError naming `where` when html.parser cannot read it."""
    try:
        parser.feed(page)
        parser.close()
    except (AssertionError, ValueError, IndexError) as exc:  # html.parser's refusals (e.g. an unknown "<![")
        raise UpstreamError(
            f"{where}: not an HTML index page the parser can read ({exc or type(exc).__name__})"
        ) from None


def anchors(page: str, where: str = "the page") -> list[str]:
    """The anchor texts of `page`; UpstreamError naming `where` when the parser cannot read it."""
    parser = _Anchors()
    parse_page(parser, page, where)
    return parser.names


def _directory(index: str) -> Path | None:
    """The local directory an index names (a path or a file:// URL), else None (an http(s) index)."""
    parts = urllib.parse.urlsplit(index)
    if parts.scheme == "":
        return Path(index)
    if parts.scheme == "file":
        return Path(urllib.request.url2pathname(parts.path))
    return None


def project_url(index: str, project: str) -> str:
    """<index>/<project>/ (PEP 503 normalised project name); for a local directory, its index.html."""
    directory = _directory(index)
    return str(directory / project / "index.html") if directory else index.rstrip("/") + "/" + project + "/"


def index_page(index: str, deadline: float | None = None) -> str:
    directory = _directory(index)
    return read_text(str(directory / "index.html") if directory else index, deadline)


def check_index(index: str, recipes: Recipes, flavor: str = "rocm", seconds: float = INDEX_SECONDS) -> Findings:
    """Torch wheels and per-arch packages on `index` that the recipes do not offer, its pages all read within
    `seconds`."""
    findings = Findings()
    deadline = time.monotonic() + seconds
    projects = set(anchors(index_page(index, deadline), index))
    known_archs = {a for r in recipes.releases[flavor].values() for a in r.archs}
    for name in sorted(projects):
        match = _DEVICE_PROJECT.fullmatch(name)
        if match and match["arch"] not in known_archs:
            findings.archs.append(f"{match['arch']} ({name})")
    if "torch" not in projects:
        return findings
    taken = {s for r in recipes.releases[flavor].values() for s in r.wheel_suffixes}
    seen = set()
    torch_page = project_url(index, "torch")
    for name in anchors(read_text(torch_page, deadline), torch_page):
        match = _TORCH_WHEEL.fullmatch(urllib.parse.unquote(name))
        if not match or (match["version"], match["local"]) in seen:
            continue
        version, local = match["version"], match["local"]
        seen.add((version, local))
        line = ".".join(version.split(".")[:2])
        pinned = recipes.torch.get(line)
        if pinned is None or flavor not in pinned.flavors:
            findings.wheels.append(f"torch {version}+{local}: no torch line {line}")
        elif version_key(version) > version_key(pinned.version):
            findings.wheels.append(f"torch {version}+{local}: newer than line {line}'s pin {pinned.version}")
        elif version == pinned.version and local not in pinned.wheel_suffixes:
            why = "" if local in taken else f" and no ROCm release takes {local}"
            findings.wheels.append(f"torch {version}+{local}: line {line} does not list {local}{why}")
    return findings


def check_releases(text: str, recipes: Recipes, flavor: str = "rocm") -> list[str]:
    """Release versions named in a release list (tags like rocm-7.2.4, therock-7.14.0) no recipe release covers."""
    known = list(recipes.releases[flavor])
    missing = set()
    for match in _RELEASE_TAG.finditer(text):
        version = match["version"]
        if not any(version == r or version.startswith(r + ".") for r in known):
            missing.add(version)
    return sorted(missing, key=version_key)
