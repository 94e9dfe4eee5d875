"""What a build context pinned, read from its manifest.json: the base image, torch (a wheel by sha256, an index
requirement, or a source commit), the patch series, the locks, and every file of the context by sha256.

One list serves two documents: the image's SBOM (builder.sbom: what the manifest pinned) and its signed build
provenance (builder.attest.build_provenance: SLSA's resolvedDependencies). The manifest is the contract between
the plan and everything downstream (docs/render.md), so only its documented fields are read; a field a manifest
lacks (a hand-made context) gives no input rather than an error. Imports no builder package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HEX64 = re.compile(r"[0-9a-f]{64}")
_GIT_SHA = re.compile(r"[0-9a-f]{40}")
#: The context's lock files and the patch series: what the image's Python stack and torch source are held to.
LOCK_FILES = ("requirements.lock", "venv.lock", "sentencepiece.lock", "torch-build.lock", "patches/series")


@dataclass(frozen=True)
class Input:
    """One pinned input. `digest` names it exactly ({"sha256": hex} or {"gitCommit": sha}); it is empty where the
    manifest pins nothing more than a name (a base image by tag, a wheel from an index without hashes)."""

    role: str  # base-image | torch-wheel | torch-index | torch-source | patch | lock | context-file
    name: str
    uri: str | None = None
    digest: dict[str, str] = field(default_factory=dict)
    note: str = ""


def sha256_of(digest: str | None) -> str | None:
    """The hex of a "sha256:<hex>" digest (an image id, a pinned base), None for anything else."""
    if isinstance(digest, str) and digest.startswith("sha256:") and _HEX64.fullmatch(digest[7:]):
        return digest[7:]
    return None


def _manifest_files(manifest: dict) -> dict[str, str]:
    files = manifest.get("files")
    if not isinstance(files, dict):
        return {}
    return {p: d for p, d in files.items() if isinstance(p, str) and isinstance(d, str) and _HEX64.fullmatch(d)}


def base_image(manifest: dict, base_digest: str | None) -> Input | None:
    """The FROM image: by the digest the build used (`base_digest`, "sha256:…") or, failing that, by tag only."""
    ref = manifest.get("base_image")
    if not isinstance(ref, str) or not ref:
        return None
    hexdigest = sha256_of(ref.rsplit("@", 1)[1] if "@" in ref else None) or sha256_of(base_digest)
    pin = manifest.get("base_image_pin") if isinstance(manifest.get("base_image_pin"), str) else ""
    return Input(
        "base-image",
        ref.rsplit("@", 1)[0],
        f"docker-image://{ref}",
        {"sha256": hexdigest} if hexdigest else {},
        f"recipe pins it: {pin}" if pin else "",
    )


def torch_inputs(manifest: dict) -> list[Input]:
    """torch as its install step takes it: the wheelhouse file, the index requirement (with the wheel hashes the
    recipes hold, when they hold any), or the source commit."""
    torch = manifest.get("torch") if isinstance(manifest.get("torch"), dict) else {}
    origin = manifest.get("torch_origin") if isinstance(manifest.get("torch_origin"), dict) else {}
    version = torch.get("expected_version") or torch.get("version") or ""
    kind = origin.get("from")
    if kind == "wheelhouse" and isinstance(origin.get("sha256"), str) and _HEX64.fullmatch(origin["sha256"]):
        return [Input("torch-wheel", str(origin.get("file")), str(origin.get("file")), {"sha256": origin["sha256"]})]
    if kind == "source-build":
        commit = origin.get("commit")
        tag = origin.get("tag_commit")
        note = f"tag {origin.get('ref')}" + (f" points at {tag}" if tag and tag != commit else "")
        return [
            Input(
                "torch-source",
                f"torch {version}".strip(),
                f"git+{origin.get('repo')}@{commit}" if commit else f"git+{origin.get('repo')}@{origin.get('ref')}",
                {"gitCommit": commit} if isinstance(commit, str) and _GIT_SHA.fullmatch(commit) else {},
                note,
            )
        ]
    if kind == "index":
        index = str(origin.get("index_url") or "")
        hashes = torch.get("wheel_hashes")
        if isinstance(hashes, dict) and hashes:
            return [
                Input("torch-wheel", wheel, index, {"sha256": digest}, str(origin.get("requirement") or ""))
                for wheel, digest in sorted(hashes.items())
                if isinstance(digest, str) and _HEX64.fullmatch(digest)
            ]
        return [Input("torch-index", str(origin.get("requirement") or f"torch=={version}"), index, {}, "unhashed")]
    return []


def patch_inputs(manifest: dict) -> list[Input]:
    """The patch series, in order: a published patch by URL and sha256, an upstream commit, a local patch file."""
    out = []
    for number, entry in enumerate(manifest.get("patches") or [], 1):
        if not isinstance(entry, dict):
            continue
        kind, ref = entry.get("kind"), str(entry.get("ref") or "")
        sha = entry.get("sha256") if isinstance(entry.get("sha256"), str) and _HEX64.fullmatch(entry["sha256"]) else ""
        if kind == "commit":
            digest = {"gitCommit": ref} if _GIT_SHA.fullmatch(ref) else {}
            out.append(Input("patch", f"{number:02d} commit {ref}", str(entry.get("url") or ""), digest))
        elif kind == "url":
            out.append(Input("patch", f"{number:02d} {ref.rsplit('/', 1)[-1]}", ref, {"sha256": sha} if sha else {}))
        else:
            out.append(Input("patch", f"{number:02d} {ref}", f"patches/{ref}", {"sha256": sha} if sha else {}))
    return out


def lock_inputs(manifest: dict) -> list[Input]:
    """The context's lock files and series by sha256, and the recipes' lock the stack was resolved into."""
    files = _manifest_files(manifest)
    out = [Input("lock", name, name, {"sha256": files[name]}) for name in LOCK_FILES if name in files]
    lock = manifest.get("lock") if isinstance(manifest.get("lock"), dict) else {}
    if isinstance(lock.get("sha256"), str) and _HEX64.fullmatch(lock["sha256"]) and lock.get("file"):
        out.append(Input("lock", str(lock["file"]), str(lock["file"]), {"sha256": lock["sha256"]}, "recipes' lock"))
    return out


def pinned(manifest: dict | None, base_digest: str | None) -> list[Input]:
    """Everything the manifest pinned, in a fixed order: base, torch, patches, locks."""
    if not isinstance(manifest, dict):
        return []
    base = base_image(manifest, base_digest)
    return [*([base] if base else []), *torch_inputs(manifest), *patch_inputs(manifest), *lock_inputs(manifest)]


def context_files(manifest: dict | None) -> list[Input]:
    """Every file of the build context by sha256, as the manifest hashed it (the context hash covers them all)."""
    if not isinstance(manifest, dict):
        return []
    return [
        Input("context-file", path, path, {"sha256": digest})
        for path, digest in sorted(_manifest_files(manifest).items())
    ]
