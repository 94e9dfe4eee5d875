"""Which cell a build context is, recomputed from our own recipes: the identity of a build record.

A build record names its request (the `envbuild image` flags, read from the context's manifest), the wheels of
its wheelhouse and its context hash. `recompute` resolves that request with the recipes in use, renders the
context in memory (nothing is written) and compares content hashes. The manifest does not say whether the torch
source and the base image were asked for or were the recipe's defaults (the plan words its reason differently),
so each is tried both ways: at most four renders, all of our own. Only when they are equal is the record a
record of that cell: the cell key is in the hashed Dockerfile, so no other cell's context has that hash. The
record's own words about its cell are never used. A context rendered from other recipes or another envbuild
version, or edited by hand, recomputes to another hash: the record cannot be filed under any cell here.
"""

from __future__ import annotations

from pathlib import Path

from builder.plan.cells import Cell
from builder.plan.recipes import RecipeError, Recipes, load
from builder.plan.render import RenderError, StaticFiles, context_files
from builder.plan.resolve import Request, ResolveError, resolve


class ContextNotRecomputed(Exception):
    """The recipes in use do not render the record's context: the message says what differs and what to do."""


def request_of(manifest: dict) -> dict:
    """The request a rendered context came from, as plain data (the build record's `request`), read from its
    manifest.json; KeyError / TypeError for a manifest without these fields (a hand-made context)."""
    torch = manifest["torch"]
    return {
        "flavor": manifest["flavor"],
        "accel_version": manifest.get("accel_version"),
        "torch": torch["line"],
        "arch": manifest.get("arch"),
        "python": manifest["python"],
        "torch_source": torch["source"],
        "base_image": manifest["base_image"],
        "install_accel": bool(manifest.get("amdgpu_install")),
    }


def wheelhouse_of(manifest: dict) -> dict[str, str]:
    """{wheelhouse/<file>: sha256} of the wheels the context's hash covers (its manifest's `files`)."""
    files = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
    return {p: d for p, d in sorted(files.items()) if p.startswith("wheelhouse/") and p.endswith(".whl")}


def recompute(
    request: dict,
    wheelhouse: dict[str, str],
    context_hash: str,
    recipes: Recipes | None = None,
    site: Path | None = None,
) -> Cell:
    """The cell whose context, rendered by these recipes for `request` with `wheelhouse`, has `context_hash`;
    ContextNotRecomputed when the recipes give another hash or cannot render the request at all."""
    return recompute_files(request, wheelhouse, context_hash, recipes, site)[0]


def recompute_files(
    request: dict,
    wheelhouse: dict[str, str],
    context_hash: str,
    recipes: Recipes | None = None,
    site: Path | None = None,
) -> tuple[Cell, dict[str, str]]:
    """`recompute`, with the {path: sha256} of every file of the context as these recipes render it (what a build
    provenance's context files are checked against)."""
    try:
        recipes = recipes or load(site=site)
        static = StaticFiles.read()
    except RecipeError as exc:
        raise ContextNotRecomputed(f"the recipes in use cannot be read: {exc}") from None
    rendered, problem = [], ""
    for candidate in _request_variants(request):
        try:
            plan = resolve(Request(**candidate), recipes)
            if plan.torch_source != request["torch_source"]:
                continue
            _, manifest = context_files(plan, static, dict(wheelhouse))
        except (ResolveError, RenderError, ValueError, TypeError) as exc:
            problem = problem or str(exc).rstrip(".")
            continue
        if manifest["context_hash"] == context_hash:
            return plan.cell, dict(manifest["files"])
        rendered.append((plan.cell.key, manifest["context_hash"][:12]))
    if not rendered:
        raise ContextNotRecomputed(f"the recipes in use cannot render its request ({_flags(request)}): {problem}")
    cell, other = rendered[0]
    raise ContextNotRecomputed(
        f"the recipes in use render {cell} ({_flags(request)}) with context hash {other}, not the record's "
        f"{context_hash[:12]}: it was built from other recipes or another envbuild version (check it with the tool "
        "and recipes that built it)"
    )


def _request_variants(request: dict) -> list[dict]:
    """The request as recorded, then with the torch source and the base image left to the recipe."""
    out = []
    for source in (request.get("torch_source"), "auto"):
        for base in (request.get("base_image"), None):
            candidate = {**request, "torch_source": source, "base_image": base}
            if candidate not in out:
                out.append(candidate)
    return out


def _flags(request: dict) -> str:
    """The request as `envbuild image` flags."""
    flavor, version = request.get("flavor"), request.get("accel_version")
    parts = [f"--{flavor} {version}" if version else f"--flavor {flavor}"]
    for name in ("torch", "arch", "python", "torch_source", "base_image"):
        if request.get(name):
            parts.append(f"--{name.replace('_', '-')} {request[name]}")
    return " ".join(parts)
