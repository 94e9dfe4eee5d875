"""One way from any text (a cell key, a build id) to a safe file name."""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


def safe_slug(text: str, max_len: int = 80) -> str:
    """A file name made of [A-Za-z0-9._+-] that cannot climb out of its folder or hide (no leading dot).

    Text that is already safe stays as it is; anything changed gets a short hash of the original, so
    two different texts never share a slug.
    """
    slug = _UNSAFE.sub("_", text).lstrip(".-")[:max_len]
    if slug == text and slug:
        return slug
    return f"{slug or 'x'}-{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"
