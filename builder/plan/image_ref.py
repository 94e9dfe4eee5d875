"""Is a string a well-formed container image reference (`[registry[:port]/]path[:tag][@digest]`)?

The grammar is the one Docker and the OCI distribution spec use (distribution/reference's
reference.go): lower-case path components separated by `/`, an optional registry host first, a tag of
at most 128 word characters, dots and dashes, and an optional `algorithm:hex` digest.
"""

from __future__ import annotations

import re

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?")
MAX_NAME_LENGTH = 255  # of the name (before the tag and digest), as in reference.go


def is_image_reference(text: str) -> bool:
    """True when `text` parses as an image reference (it says nothing about whether the image exists)."""
    if not _REFERENCE.fullmatch(text):
        return False
    name = text.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    return len(name) <= MAX_NAME_LENGTH
