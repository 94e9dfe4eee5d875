"""The report's files read as a browser would: compare/<slug>.js and the names in compare.html (strictly), the index
across its pages."""

from __future__ import annotations

import json
import re
from pathlib import Path

from builder.slug import safe_slug

PREFIX, SUFFIX = "envbuildCompare.register(", ");\n"


def strict_json(text: str):
    """What a browser's JSON.parse accepts: no NaN/Infinity."""

    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def compare_files(site: Path) -> dict[str, str]:
    """compare.html's cell key -> script map (its one JSON element of files)."""
    (blob,) = re.findall(
        r'<script type="application/json" id="files">(.*?)</script>', (site / "compare.html").read_text(), re.S
    )
    return strict_json(blob)


def compare_scripts(site: Path) -> dict[str, list[dict]]:
    """cell key -> profiles, from every compare/<slug>.js. Each file is exactly one register call around one
    strict JSON object, with no `<`, `>` or `&`; its name is the slug of the key it holds, and compare.html
    names exactly these files."""
    out: dict[str, list[dict]] = {}
    for path in sorted((site / "compare").iterdir()):
        text = path.read_text()
        assert text.startswith(PREFIX) and text.endswith(SUFFIX), (path, text[:80], text[-80:])
        assert not set("<>&") & set(text), path
        entry = strict_json(text[len(PREFIX) : -len(SUFFIX)])
        assert set(entry) == {"key", "profiles"} and entry["profiles"], path
        assert path.name == f"{safe_slug(entry['key'])}.js", path
        out[entry["key"]] = entry["profiles"]
    assert compare_files(site) == {key: f"compare/{safe_slug(key)}.js" for key in out}
    return out


def index_pages(site: Path) -> str:
    """The text of every index page (index.html, index-2.html, ...: the index comes in pages of 300 cells, and the
    recipes alone hold more cells than one page)."""
    pages = sorted(site.glob("index*.html"), key=lambda p: int(re.sub(r"\D", "", p.name) or 1))
    assert pages and pages[0].name == "index.html", pages
    return "".join(p.read_text() for p in pages)
