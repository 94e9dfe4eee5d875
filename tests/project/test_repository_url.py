"""The repository's URL is written once, in pyproject.toml [project.urls] (a marked placeholder until the project is
published: RFC 2606's `.invalid` never resolves), and every clone line of the docs names that one."""

from __future__ import annotations

import re
import tomllib

from repo import REPO_ROOT

DOCS = ["README.md", "CONTRIBUTING.md", "docs/hpc.md"]


def test_every_clone_line_names_the_one_repository_url():
    url = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    assert re.match(r"^https://\S+$", url)
    placeholder = url.startswith("https://envbuild.invalid/")
    for name in DOCS:
        text = (REPO_ROOT / name).read_text()
        assert "<this repository>" not in text, name
        clones = re.findall(r"git clone (\S+)", text)
        assert clones and set(clones) == {url}, (name, clones)
        if placeholder:  # a placeholder says so on each line that uses it
            lines = [line for line in text.splitlines() if url in line]
            assert all("PLACEHOLDER" in line for line in lines), (name, lines)
