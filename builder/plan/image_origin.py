"""Who made an image, as far as a digest shows it: a vendor's name is shown only where the engine's digest backs it.

An image's name is whatever its owner tagged it; anyone can `docker tag` an image `rocm/pytorch:…` or copy a SIF to
a path that looks like a site's. So:

- "AMD image" only when the engine pulled the image from AMD's repository: its RepoDigests (recorded by the run as
  `repo_digests`) name `rocm/pytorch@sha256:…` (a local tag or a loaded archive has none). When that digest is one
  AMD's docs link for a tag (recipes/amd-images.toml, with its source), the label names that tag and says "digest as
  AMD publishes it"; otherwise it names the digest.
- Any other image named `rocm/pytorch…` shows as its name with "origin unverified".
- A SIF under /appl/local/containers/ (where LUMI keeps its PyTorch SIFs: DeiC-HPC/cotainr#67) shows as "SIF at a
  LUMI path": no LUMI digest is published here, so never as "LUMI SIF".

The label is derived again from the image block wherever it is shown, so a result's own `vendor` field is never
what a page says.
"""

from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from builder import bounded_read
from builder.paths import RECIPES_DIR

AMD_IMAGES_FILE = RECIPES_DIR / "amd-images.toml"
_AMD_NAME = re.compile(
    r"(?:docker\.io/|index\.docker\.io/)?rocm/pytorch(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)
_AMD_PULLED = re.compile(r"(?:docker\.io/|index\.docker\.io/)?rocm/pytorch@(sha256:[0-9a-f]{64})")
_LUMI = re.compile(r"/appl/local/containers/(?:[A-Za-z0-9_+-][A-Za-z0-9._+-]*/)*[A-Za-z0-9_+-][A-Za-z0-9._+-]*\.sif")


class _Published(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tag: str = Field(pattern=r"^[\w][\w.-]{0,127}$")
    digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    source: str
    listed_as: str | None = None


class _AmdImages(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sources: dict[str, str]
    rocm_pytorch: list[_Published]


@lru_cache(maxsize=4)
def amd_published(path: Path = AMD_IMAGES_FILE) -> dict[str, str]:
    """digest -> the rocm/pytorch tag AMD's docs link it for (recipes/amd-images.toml); ValueError for a file that
    breaks its shape or names a source it does not list."""
    try:
        data = _AmdImages.model_validate(tomllib.loads(bounded_read.read_file(path, 1 << 20).decode("utf-8")))
    except (OSError, ValueError, ValidationError) as exc:
        raise ValueError(f"{path}: not a list of AMD's image digests ({str(exc).splitlines()[0]})") from None
    unknown = sorted({row.source for row in data.rocm_pytorch} - set(data.sources))
    if unknown:
        raise ValueError(f"{path}: rows cite sources it does not list: {', '.join(unknown)}")
    return {row.digest: row.tag for row in data.rocm_pytorch}


def vendor_label(image: dict | None) -> str | None:
    """The vendor label of a run's image block (see the module doc); None for an image that names no vendor."""
    if not isinstance(image, dict):
        return None
    tag = image.get("tag") if isinstance(image.get("tag"), str) else ""
    pulled = [m[1] for d in _strings(image.get("repo_digests")) if (m := _AMD_PULLED.fullmatch(d))]
    if pulled:
        published = amd_published()
        known = [d for d in pulled if d in published]
        if known:
            return f"AMD image rocm/pytorch:{published[known[0]]} (digest as AMD publishes it)"
        return f"AMD image rocm/pytorch@{pulled[0]} (pulled from AMD's repository; a digest AMD's docs do not list)"
    if _AMD_NAME.fullmatch(tag):
        return f"{tag} (a local name: origin unverified)"
    if _LUMI.fullmatch(tag):
        return f"SIF at a LUMI path: {tag.rsplit('/', 1)[-1]} (origin unverified)"
    return None


def _strings(value) -> list[str]:
    return [v for v in value if isinstance(v, str)][:16] if isinstance(value, list) else []
