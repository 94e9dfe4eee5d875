"""The context's wheelhouse/: local wheels every pip step is offered, hashed into the content hash.

A wheel that changes the image must change its tag, so every file under wheelhouse/ is part of the
content hash and of manifest.json (`files`), and the manifest says where torch comes from
(`torch_origin`): a wheelhouse file and its sha256 (the torch install step installs such a file by
path), the source build, or an index.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from builder.paths import file_sha256
from builder.plan.resolve import Plan, git_text

WHEELHOUSE = "wheelhouse"
KEEP = f"{WHEELHOUSE}/.keep"  # an empty placeholder, rendered with every context
WHEEL_SUFFIXES = (".whl", ".tar.gz", ".zip")


class WheelhouseError(Exception):
    """A wheelhouse cannot be used (not a dir, no wheels, or not what the context's manifest hashed)."""


def wheels_in(directory: Path) -> list[Path]:
    """The wheel/sdist files of a --wheelhouse dir, sorted; WheelhouseError if there are none."""
    directory = Path(directory)
    if not directory.is_dir():
        raise WheelhouseError(f"--wheelhouse {directory}: not a directory")
    wheels = sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(WHEEL_SUFFIXES))
    if not wheels:
        raise WheelhouseError(f"--wheelhouse {directory}: holds no .whl/.tar.gz/.zip files")
    return wheels


def hashes(context_wheelhouse: Path) -> dict[str, str]:
    """{"wheelhouse/<name>": sha256} of every file under a context's wheelhouse/ except the placeholder."""
    root = Path(context_wheelhouse)
    if not root.is_dir():
        return {}
    found = {f"{WHEELHOUSE}/{p.relative_to(root).as_posix()}": p for p in sorted(root.rglob("*")) if p.is_file()}
    return {rel: file_sha256(path) for rel, path in found.items() if rel != KEEP}


def stage(wheels: list[Path], target: Path) -> None:
    """Hard-link (or copy) `wheels` into `target` (a new context's wheelhouse/)."""
    target.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        try:
            os.link(wheel, target / wheel.name)
        except OSError:  # another filesystem, or no permission to link
            shutil.copy2(wheel, target / wheel.name)


def torch_origin(plan: Plan, wheel_hashes: dict[str, str]) -> dict:
    """Where the image's torch comes from, as the torch install step decides it."""
    if plan.torch_source == "source":
        git = plan.git_source
        return {
            "from": "source-build",
            "repo": git["repo"],
            "ref": git["ref"],
            "commit": git["commit"] or None,
            "tag_commit": git.get("tag_commit"),
            "proof": git["proof"],
        }
    pytag = "cp" + plan.cell.python.replace(".", "")
    prefix = f"{WHEELHOUSE}/torch-{plan.torch_version}-{pytag}-"
    matches = sorted(p for p in wheel_hashes if p.startswith(prefix) and p.endswith(".whl"))
    if matches:  # the script takes the first match of its glob, which bash sorts the same way
        return {"from": "wheelhouse", "file": matches[0], "sha256": wheel_hashes[matches[0]]}
    return {
        "from": "index",
        "index_url": plan.wheel_index_url or "https://pypi.org/simple",
        "requirement": f"torch=={plan.torch_version}",
    }


def origin_text(origin: dict) -> str:
    """One line for a torch_origin record."""
    if origin["from"] == "wheelhouse":
        return f"{origin['file']} (sha256 {origin['sha256']})"
    if origin["from"] == "index":
        return f"{origin['requirement']} from {origin['index_url']}"
    git = {"repo": origin.get("repo", ""), "ref": origin.get("ref", origin.get("git_tag", ""))}
    git |= {"commit": origin.get("commit"), "tag_commit": origin.get("tag_commit")}
    return f"source build of {git_text(git)} ({origin.get('proof', '?')})"


def check(context_dir: Path, manifest: dict) -> None:
    """Raise WheelhouseError when the context's wheelhouse/ is not what its manifest hashed."""
    recorded = {p: d for p, d in manifest.get("files", {}).items() if p.startswith(WHEELHOUSE + "/") and p != KEEP}
    found = hashes(Path(context_dir) / WHEELHOUSE)
    if found != recorded:
        changed = sorted(p for p in recorded.keys() & found.keys() if recorded[p] != found[p])
        parts = [
            f"{label}: {', '.join(paths)}"
            for label, paths in (
                ("added", sorted(found.keys() - recorded.keys())),
                ("removed", sorted(recorded.keys() - found.keys())),
                ("changed", changed),
            )
            if paths
        ]
        raise WheelhouseError(
            f"{context_dir}/wheelhouse/ is not what its manifest.json hashed ({'; '.join(parts)}); the image tag "
            "would not describe what gets built. Re-render the context (`envbuild render ... -o DIR`, or "
            "`envbuild image ... --wheelhouse DIR`) so the content hash covers the wheels."
        )
