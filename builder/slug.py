"""One way from any text (a cell key, a build id) to a safe file name (`safe_slug`), to text safe to print on a
terminal (`terminal_safe`), to one such line (`plain`), and to text from an image shown as data (`escaped`). A
neutral module: it imports nothing of builder; any package may use it."""

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


#: C0 and C1 controls and DEL, and the bidi controls (LRM/RLM, ALM, LRE..RLO, LRI..PDI) that reorder a line.
_ESCAPED = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_ESCAPED_BUT_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def escaped(text: str, *, lines: bool = False) -> str:
    """Text an image wrote (its probe's answer, its output), shown as data: every control character (an escape
    sequence's ESC, a carriage return, a bidi control) becomes a visible escape such as \\x1b or \\u202e, so it can
    neither steer a terminal nor reorder what a reader sees. `lines` keeps line breaks and tabs."""
    return (_ESCAPED_BUT_LINES if lines else _ESCAPED).sub(_visible, text)


def _visible(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
