"""sha256 of the official torch wheels the recipes pin, as their index publishes them (recipes/wheel-hashes.toml).

`envbuild recipes check-upstream --record` reads the `#sha256=` fragment PEP 503 indexes put on each file link
and records those of the wheels a recipe pins (exact version and index suffix). The manifest names them, or says
"unhashed" where none was recorded. Only a file name matching the torch wheel grammar and a 64-hex digest are kept.
"""

from __future__ import annotations

import html.parser
import re
import tomllib
import urllib.parse
from functools import lru_cache
from pathlib import Path

from builder.plan.recipes import Recipes

FILE = "wheel-hashes.toml"
_WHEEL = re.compile(
    r"torch-(?P<version>\d+\.\d+\.\d+)\+(?P<local>[a-z]+(?:\d+(?:\.\d+){0,2})?)-"
    r"cp\d+-cp\d+t?-(?:manylinux|linux)[A-Za-z0-9_.]*\.whl"
)
_SHA256 = re.compile(r"[0-9a-f]{64}")


class _Links(html.parser.HTMLParser):
    """(anchor text, href) of every <a> element."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href, self._text = dict(attrs).get("href") or "", ""

    def handle_data(self, data):
        if self._href is not None:
            self._text += data

    def handle_endtag(self, tag):
        if tag == "a" and self._href is not None:
            self.links.append((self._text.strip(), self._href))
            self._href = None


def pinned_hashes(page: str, recipes: Recipes, flavor: str = "rocm", where: str = "the page") -> dict[str, str]:
    """{wheel file: sha256} of the torch wheels on a PEP 503 project page that a recipe pins; UpstreamError naming
    `where` when the parser cannot read the page."""
    from builder.plan.upstream import parse_page

    parser = _Links()
    parse_page(parser, page, where)
    found = {}
    for text, href in parser.links:
        name = urllib.parse.unquote(text)
        match = _WHEEL.fullmatch(name)
        digest = urllib.parse.urlsplit(href).fragment.removeprefix("sha256=")
        if not match or not _SHA256.fullmatch(digest):
            continue
        line = recipes.torch.get(".".join(match["version"].split(".")[:2]))
        pinned = line and flavor in line.flavors and match["version"] == line.version
        if pinned and match["local"] in line.wheel_suffixes:
            found[name] = digest
    return found


@lru_cache(maxsize=8)
def recorded(root: Path, digest: str) -> dict[str, str]:
    """read(root), once per content of the recipes (`digest`: Recipes.digest)."""
    return read(root)


def read(root: Path) -> dict[str, str]:
    """{wheel file: sha256} recorded under `root` ({} when nothing was recorded)."""
    path = root / FILE
    if not path.is_file():
        return {}
    data = tomllib.loads(path.read_text()).get("wheel", {})
    bad = [k for k, v in data.items() if not (_WHEEL.fullmatch(k) and isinstance(v, str) and _SHA256.fullmatch(v))]
    if bad:
        raise ValueError(f"{path}: not a torch wheel name with a 64-hex sha256: {bad}")
    return dict(data)


HEADER = [
    "# sha256 of official torch wheels the recipes pin, as their PyTorch index lists them (PEP 503",
    "# #sha256= links), recorded by `envbuild recipes check-upstream --record`.",
]


def record(root: Path, hashes: dict[str, str]) -> Path:
    """Merge `hashes` into root/wheel-hashes.toml, keeping the file's comments above [wheel] (where its sources are
    named); returns its path."""
    path = root / FILE
    merged = {**read(root), **hashes}
    kept = path.read_text().split("[wheel]", 1)[0].splitlines() if path.is_file() else []
    notes = [line for line in kept if line.startswith("#")] or HEADER
    lines = [*notes, "", "[wheel]", *(f'"{name}" = "{digest}"' for name, digest in sorted(merged.items()))]
    path.write_text("\n".join(lines) + "\n")
    return path


def for_requirement(hashes: dict[str, str], version: str, python: str) -> dict[str, str]:
    """The recorded wheels of `version` ("2.5.1+rocm6.2") for CPython `python` ("3.10")."""
    prefix = f"torch-{version}-cp{python.replace('.', '')}-"
    return {name: digest for name, digest in sorted(hashes.items()) if name.startswith(prefix)}
