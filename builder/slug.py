"""One way from any text (a cell key, a build id) to a safe file name (`safe_slug`), to text safe to print on a
terminal (`terminal_safe`), and to one such line (`plain`). A neutral module: it imports nothing of builder; any
package may use it."""

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


_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """Text from data (a file, a tool's stderr) for the terminal: control characters (escape sequences) become
    spaces; line breaks and tabs stay."""
    return _CONTROL_CHARS.sub(" ", text)


def plain(text: object) -> str:
    """Data made safe for one terminal line: no control characters (escape sequences), no line breaks."""
    return terminal_safe(str(text)).replace("\n", " ")
