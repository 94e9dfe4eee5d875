"""What upstream publishes that recipes/ lacks: torch wheels and GPU archs on a PEP 503 index, ROCm releases.

`envbuild recipes check-upstream` reads a PEP 503 "simple" index (the PyTorch ROCm indexes,
https://download.pytorch.org/whl/rocm7.2/, AMD's own indexes the recipes take torch from, or AMD's per-arch indexes)
and a list of ROCm release tags, and compares them with the recipes. An index names ROCm releases too: the local
label of its torch wheels (+rocm10.1.0) and the files of its `rocm` project (rocm-10.1.0.tar.gz); one newer than
the recipes is reported (pre-releases such as 10.2.0a20260916 are not). Everything read is untrusted: only names
matching a strict grammar (a wheel filename, a project name, a release tag) are used; links are never followed,
only <index>/<project>/ pages this module builds itself are fetched, and a redirect only on the index's own
host, never from https to http (builder.bounded_read.read_url).
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
#: rocm-7.2.4, therock-7.14.0, therock-10.1 (a final release: not therock-10.2.0rc1, not a branch therock-10.1-2026...)
_RELEASE_TAG = re.compile(r"\b(?:rocm|therock)-(?P<version>\d+\.\d+(?:\.\d+)?)(?![0-9A-Za-z.+-])")
#: The `rocm` meta package of AMD's indexes (TheRock): rocm-10.1.0.tar.gz, rocm-7.14.0-py3-none-any.whl
_ROCM_FILE = re.compile(r"rocm-(?P<version>\d+\.\d+\.\d+)(?:\.tar\.gz|-py3-none-any\.whl)")
#: The exact ROCm version a pip-route release pins: rocm[libraries,device-{arch}]==10.1.0
_ROCM_PIN = re.compile(r"rocm(?:\[[^\]]*\])?==(?P<version>\d+\.\d+\.\d+)")
MAX_PAGE = 8 * 1024 * 1024  # bytes read from one index page
INDEX_SECONDS = 25  # one index's pages, all of them, are read within this time however slowly a server sends


class UpstreamError(Exception):
    """An index or release list could not be read or is not what it claims to be."""


@dataclass
class Findings:
    """What the upstream sources have and the recipes lack."""

    wheels: list[str] = field(default_factory=list)  # "torch 2.12.0+rocm7.2: no torch line 2.12"
    archs: list[str] = field(default_factory=list)  # "gfx1151 (amd-torch-device-gfx1151)"
    releases: list[str] = field(default_factory=list)  # "10.2.0" or, from an index, "10.2.0 (torch 2.15.0+rocm10.2.0)"

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
    """Torch wheels, per-arch packages and ROCm releases on `index` that the recipes do not offer (releases: newer
    than the recipes, builder.plan.upstream.newer_releases), its pages all read within `seconds`."""
    findings = Findings()
    deadline = time.monotonic() + seconds
    projects = set(anchors(index_page(index, deadline), index))
    known_archs = {a for r in recipes.releases[flavor].values() for a in r.archs}
    for name in sorted(projects):
        match = _DEVICE_PROJECT.fullmatch(name)
        if match and match["arch"] not in known_archs:
            findings.archs.append(f"{match['arch']} ({name})")
    named: dict[str, str] = {}  # ROCm version -> what on the index names it
    if "rocm" in projects:
        rocm_page = project_url(index, "rocm")
        for name in anchors(read_text(rocm_page, deadline), rocm_page):
            if match := _ROCM_FILE.fullmatch(urllib.parse.unquote(name)):
                named.setdefault(match["version"], f"rocm {match['version']}")
    if "torch" in projects:
        _check_torch(index, recipes, flavor, deadline, findings, named)
    findings.releases += [f"{v} ({named[v]})" for v in newer_releases(list(named), recipes, flavor)]
    return findings


def _check_torch(index: str, recipes: Recipes, flavor: str, deadline: float, findings: Findings, named: dict) -> None:
    """The torch wheels of `index` the recipes do not offer, into `findings`; the ROCm releases their local labels
    name, into `named`."""
    taken = {s for r in recipes.releases[flavor].values() for s in r.wheel_suffixes}
    seen = set()
    torch_page = project_url(index, "torch")
    for name in anchors(read_text(torch_page, deadline), torch_page):
        match = _TORCH_WHEEL.fullmatch(urllib.parse.unquote(name))
        if not match or (match["version"], match["local"]) in seen:
            continue
        version, local = match["version"], match["local"]
        seen.add((version, local))
        named.setdefault(local.removeprefix("rocm"), f"torch {version}+{local}")
        line = ".".join(version.split(".")[:2])
        pinned = recipes.torch.get(line)
        if pinned is None or flavor not in pinned.flavors:
            findings.wheels.append(f"torch {version}+{local}: no torch line {line}")
        elif version_key(version) > version_key(pinned.version):
            findings.wheels.append(f"torch {version}+{local}: newer than line {line}'s pin {pinned.version}")
        elif version == pinned.version and local not in pinned.wheel_suffixes:
            why = "" if local in taken else f" and no ROCm release takes {local}"
            findings.wheels.append(f"torch {version}+{local}: line {line} does not list {local}{why}")


def check_releases(text: str, recipes: Recipes, flavor: str = "rocm") -> list[str]:
    """Release versions a release list names (tags like rocm-7.2.4, therock-7.14.0) that are newer than the recipes."""
    return newer_releases([m["version"] for m in _RELEASE_TAG.finditer(text)], recipes, flavor)


def newer_releases(versions: list[str], recipes: Recipes, flavor: str = "rocm") -> list[str]:
    """The `versions` (7.14.1, 10.2.0) no recipe release covers and that are newer than the recipes: newer than every
    release of their minor line the recipes know (7.14.2 after 7.14.1), or of a minor line newer than all of theirs
    (10.2 after 10.1). A release named by its minor line (7.2, a base image tag) covers its point releases; one that
    pins its exact version (the pip route's rocm==7.14.1) covers that version. Sorted, each once."""
    known = [_pinned_version(release) or release.version for release in recipes.releases[flavor].values()]
    newest_line = max((version_key(v)[:2] for v in known), default=())
    found = set()
    for version in versions:
        if version in recipes.releases[flavor] or any(version == v or version.startswith(v + ".") for v in known):
            continue
        key = version_key(version)
        same_line = [version_key(v) for v in known if version_key(v)[:2] == key[:2]]
        if (key > max(same_line)) if same_line else (key[:2] > newest_line):
            found.add(version)
    return sorted(found, key=version_key)


def _pinned_version(release) -> str | None:
    """The exact ROCm version a release installs when it pins one (the pip route's rocm[...]==X.Y.Z), else None."""
    accel = release.pip_accel
    pins = [m["version"] for r in (accel.requirements if accel else ()) if (m := _ROCM_PIN.fullmatch(r))]
    return pins[0] if pins else None
