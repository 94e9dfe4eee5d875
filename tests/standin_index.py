"""Stand-in wheels and a local PEP 503 simple index of them (file:// URLs), for tests of what an installer takes from
which index: each wheel is a real, installable wheel (METADATA, WHEEL, RECORD) whose package holds one file naming
where it came from."""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from pathlib import Path


def wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = (), origin: str = "") -> Path:
    """Write a py3-none-any wheel of `name` `version` into `folder`; its `<module>/ORIGIN` file holds `origin`."""
    dist = re.sub(r"[-.]+", "_", name)
    info = f"{dist}-{version}.dist-info"
    extras = sorted({m.group(1) for r in requires for m in [re.search(r"extra == ['\"]([^'\"]+)['\"]", r)] if m})
    files = {
        f"{dist}/__init__.py": f"__version__ = {version!r}\n",
        f"{dist}/ORIGIN": origin,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Provides-Extra: {e}\n" for e in extras)
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: envbuild-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }

    def digest(text: str) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()

    record = "".join(f"{path},sha256={digest(text)},{len(text.encode())}\n" for path, text in files.items())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name_in, text in {**files, f"{info}/RECORD": record + f"{info}/RECORD,,\n"}.items():
            archive.writestr(name_in, text)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def simple_index(root: Path, wheels: list[Path]) -> str:
    """A PEP 503 index under `root` serving `wheels` (each linked with its #sha256=); returns its file:// URL."""
    projects: dict[str, list[Path]] = {}
    for path in wheels:
        project = re.sub(r"[-_.]+", "-", path.name.split("-")[0]).lower()
        projects.setdefault(project, []).append(path)
    root.mkdir(parents=True, exist_ok=True)
    for project, files in projects.items():
        page = root / project
        page.mkdir(exist_ok=True)
        links = "".join(f'<a href="{p.as_uri()}#sha256={sha256(p)}">{p.name}</a>\n' for p in files)
        (page / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    links = "".join(f'<a href="{p}/">{p}</a>\n' for p in sorted(projects))
    (root / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    return root.as_uri()
