"""The one way a file from outside is read: result.json, SIF sidecars, recipe overlays, .db files, index pages,
attestations.

`read_file(path, limit)` (and `copy_file`, for a file another library opens) opens without following a final
symlink and without blocking on a FIFO, refuses anything but a regular file, and refuses a file larger than `limit`
bytes before reading it. `check_json` and
`check_toml` scan the text before a parser sees it and refuse nesting deeper than `max_depth` and more than
`max_values` values (JSON) or a key of more than MAX_KEY_PARTS dotted parts (TOML): the parsers recurse per
level and allocate per value, so a small file could otherwise exhaust the stack or the memory. `read_url` reads
an http(s) page of at most `limit` bytes within one total deadline, however slowly the server sends, following a
redirect only on the same host and never from https to http. Every
refusal is a BoundedReadError (a ValueError) whose message says what is wrong; the caller names the file.
Imports nothing from builder.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import time
import urllib.parse
import urllib.request
from pathlib import Path

#: Nesting that the doors' parsers are given at most (the deepest real document, an image manifest, is 4 deep).
MAX_DEPTH = 64
#: Dotted parts of one TOML key or table header (recipes use at most 3: [release."6.2"]).
MAX_KEY_PARTS = 16
#: Bytes of one network read; a deadline is checked between reads.
_CHUNK = 64 * 1024


class BoundedReadError(ValueError):
    """A file or page from outside that the doors do not read (the message says why and what to do)."""


def _open_regular(path: Path | str, limit: int):
    """A binary handle on `path`, a regular file of at most `limit` bytes (checked on the open descriptor)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        if os.path.islink(path):
            raise BoundedReadError("a symbolic link: give the file it points to") from None
        raise
    handle = os.fdopen(fd, "rb")
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        handle.close()
        raise BoundedReadError("not a regular file (a FIFO, socket, device or folder)")
    if info.st_size > limit:
        handle.close()
        raise BoundedReadError(f"{info.st_size} bytes: larger than {limit} bytes, the most read here")
    return handle


def read_file(path: Path | str, limit: int) -> bytes:
    """The bytes of `path`, a regular file (not a symlink, FIFO, socket or device) of at most `limit` bytes.
    OSError when it cannot be opened (e.g. missing), BoundedReadError for what it is."""
    with _open_regular(path, limit) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise BoundedReadError(f"larger than {limit} bytes, the most read here")
    return data


def copy_file(path: Path | str, target: Path | str, limit: int) -> None:
    """Copy `path` (checked as read_file checks it) to a new file `target`, in chunks: for files another
    library opens afterwards (a SQLite database). The partial copy is removed when the file grows past `limit`."""
    with _open_regular(path, limit) as src, open(target, "xb") as dst:
        copied = 0
        while chunk := src.read(min(_CHUNK * 16, limit + 1 - copied)):
            dst.write(chunk)
            copied += len(chunk)
            if copied > limit:
                break
    if copied > limit:
        os.unlink(target)
        raise BoundedReadError(f"larger than {limit} bytes, the most read here")


#: From where a scan stands, everything up to the next structural byte of a JSON text (group 1) or its end (group 1
#: empty). Strings are skipped whole; an unterminated one runs to the end (the parser stops there). Every repeat is
#: possessive and over single characters or whole tokens: the regex engine keeps no state per character skipped,
#: so the scan's memory does not grow with the text.
_JSON_NEXT = re.compile(rb'(?:[^\[\]{},"]++|"(?:[^"\\]++|\\.?)*+(?:"|\Z))*+([\[\]{},]|\Z)', re.DOTALL)


def check_json(raw: bytes, *, max_depth: int = MAX_DEPTH, max_values: int) -> None:
    """Refuse JSON text nested deeper than `max_depth` or holding more than `max_values` arrays, objects and
    entries, before a parser builds it. One pass over the bytes with strings skipped, in memory that does not grow
    with the text; it stops where the brackets close more than they opened (the parser refuses the text there)."""
    depth = deepest = values = 0
    for match in _JSON_NEXT.finditer(raw):
        char = match[1]
        if char == b"," or char == b"[" or char == b"{":
            values += 1
            if values > max_values:
                raise BoundedReadError(f"more than {max_values} JSON values (arrays, objects and entries)")
            if char != b",":
                depth += 1
                deepest = max(deepest, depth)
        elif char:
            depth -= 1
            if depth < 0:
                break
    if deepest > max_depth:
        raise BoundedReadError(f"nested {deepest} deep; at most {max_depth} is read")


#: TOML's lexical rules as tomllib applies them, one token at a time from where a scan stands: a comment runs from
#: '#' to the line end; a multi-line basic string ends at the first unescaped triple quote and takes up to two
#: more quotes, a basic string at an unescaped quote (unterminated: before the line end, where the parser stops);
#: literal strings know no escapes. Group 1 is the next structural character outside all of them ([ ] { } . or a
#: line end), empty at the end of the text. Possessive repeats, as in _JSON_NEXT: memory that does not grow.
_TOML_NEXT = re.compile(
    r"(?:[^\[\]{}.\n\"'#]++"
    r'|"""(?:[^"\\]++|\\.?|"(?!""))*+(?:"""|\Z)"{0,2}+'
    r"|'''(?:[^']++|'(?!''))*+(?:'''|\Z)'{0,2}+"
    r'|"(?:[^"\\\n]++|\\[^\n]?)*+"?+'
    r"|'[^'\n]*+'?+"
    r"|#[^\n]*+"
    r")*+([\[\]{}.\n]|\Z)",
    re.DOTALL,
)


def check_toml(text: str, *, max_depth: int = MAX_DEPTH) -> None:
    """Refuse TOML text nested deeper than `max_depth` (arrays and inline tables) or with a line holding more
    than MAX_KEY_PARTS - 1 dots outside strings and comments (a dotted key or table header of too many parts:
    TOML keeps each key on one line), before tomllib (which recurses per level and per part) reads it. The scan
    reads comments and the four kinds of string as the parser does, in one pass; it stops where the brackets
    close more than they opened (the parser refuses the text there)."""
    depth = deepest = dots = first_dot = 0
    for match in _TOML_NEXT.finditer(text):
        char = match[1]
        if char == ".":
            first_dot = first_dot if dots else match.start(1)
            dots += 1
        elif char == "[" or char == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif char == "]" or char == "}":
            depth -= 1
            if depth < 0:
                break
        elif dots >= MAX_KEY_PARTS:  # the line ends (or the text) after too many dots
            raise BoundedReadError(
                f"line {text.count(chr(10), 0, first_dot) + 1}: {dots} dots outside strings, a dotted key of more "
                f"than {MAX_KEY_PARTS} parts; recipe keys have at most 3"
            )
        else:
            dots = 0
    if deepest > max_depth:
        raise BoundedReadError(f"nested {deepest} deep; at most {max_depth} is read")


class _SameHostRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only on the host that was asked (its port too, unless http becomes https), and never
    from https to http: a page is what its own host serves, over the channel that was asked for."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        old, new = urllib.parse.urlsplit(req.full_url), urllib.parse.urlsplit(newurl)
        why = ""
        if new.scheme not in ("http", "https") or (old.scheme, new.scheme) == ("https", "http"):
            why = f"from {old.scheme} to {new.scheme or 'no scheme'}"
        elif (new.hostname or "") != (old.hostname or "") or (old.scheme == new.scheme and _port(old) != _port(new)):
            why = "to another host"
        if why:
            fp.close()
            raise BoundedReadError(
                f"redirected {why} ({req.full_url[:200]!r} -> {newurl[:200]!r}): a redirect is followed only on the "
                "same host and never to http; give the URL it should be read from"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _port(parts: urllib.parse.SplitResult) -> int | None:
    try:
        return parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:  # a port that is no number: never the same as the one asked
        return None


_OPENER = urllib.request.build_opener(_SameHostRedirects)


def read_url(url: str, limit: int, deadline: float) -> bytes:
    """At most `limit` bytes of an http(s) URL (a file:// one is a path: read_file), all read before `deadline`
    (time.monotonic()): BoundedReadError when the page is larger, the deadline passes (however slowly the
    server sends) or the server redirects to another host or from https to http; OSError when it cannot be
    fetched."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise BoundedReadError("the time for this index ran out before this page was asked for")
    data = bytearray()
    try:
        with _OPENER.open(url, timeout=left) as response:  # the caller checks the scheme
            while len(data) <= limit:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BoundedReadError(f"not read within the time allowed ({len(data)} bytes came)")
                sock = _socket_of(response)
                if sock is not None:
                    sock.settimeout(min(left, 30))
                chunk = response.read1(_CHUNK)
                if not chunk:
                    break
                data += chunk
    except (socket.timeout, TimeoutError):
        raise BoundedReadError(f"not read within the time allowed ({len(data)} bytes came)") from None
    if len(data) > limit:
        raise BoundedReadError(f"larger than the {limit} bytes read from one page")
    return bytes(data)


def _socket_of(response) -> socket.socket | None:
    """The socket under an http.client response, whose timeout is cut to the time left before each read (None
    where the layout differs: then one read waits at most the time that was left when the page was asked for)."""
    fp = getattr(response, "fp", None)
    raw = getattr(fp, "raw", None)
    return getattr(raw, "_sock", None)
