"""The secret values this host knows, and their removal from every log envbuild keeps or publishes.

`known_secrets()` reads the Hugging Face tokens a run could hand on: $HF_TOKEN and $HUGGING_FACE_HUB_TOKEN, and
the token files huggingface_hub writes ($HF_TOKEN_PATH, else $HF_HOME/token, and the `stored_tokens` file beside
it). `Scrubber` removes them from a stream (a container's output as it arrives: a value split across two chunks
is still found), `scrub` from bytes at hand, `scrub_tail` from the end of a log (a value the cut fell into too),
and `copy_scrubbed` from a log copied through the bounded reader. Values shorter than MIN_LENGTH are not treated as secrets (they
would blank ordinary words). A neutral module: it imports nothing of builder but bounded_read.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping

from builder import bounded_read

#: The environment variables huggingface_hub reads a token from.
TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
MIN_LENGTH = 8
REPLACEMENT = b"[secret removed]"
#: What a log copied with copy_scrubbed may weigh (a run's container.log is capped below this as it is written).
MAX_KEPT_LOG = 80 << 20
#: What a token file may weigh here (a token is about 40 bytes; a stored_tokens file holds a few of them).
_MAX_TOKEN_FILE = 64 * 1024
_STORED = re.compile(rb"^\s*hf_token\s*=\s*(\S+)\s*$", re.M)


def hf_home(environ: Mapping[str, str] = os.environ) -> Path:
    """$HF_HOME, else huggingface_hub's default (~/.cache/huggingface, or under $XDG_CACHE_HOME)."""
    if environ.get("HF_HOME"):
        return Path(environ["HF_HOME"]).expanduser()
    cache = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "huggingface"


def hf_token(environ: Mapping[str, str] = os.environ) -> str | None:
    """The token huggingface_hub would use here: $HF_TOKEN (or the older name), else the token file."""
    for name in TOKEN_VARIABLES:
        if environ.get(name, "").strip():
            return environ[name].strip()
    raw = _token_file(Path(environ.get("HF_TOKEN_PATH") or hf_home(environ) / "token"))
    return raw.decode("utf-8", "replace").strip() or None if raw else None


def known_secrets(environ: Mapping[str, str] = os.environ) -> tuple[bytes, ...]:
    """Every token value this host holds (the variables and the token files), longest first."""
    found = {environ[name].strip().encode() for name in TOKEN_VARIABLES if environ.get(name, "").strip()}
    home = hf_home(environ)
    for path in {Path(environ.get("HF_TOKEN_PATH") or home / "token"), home / "token"}:
        if raw := _token_file(path):
            found.add(raw.strip())
    if raw := _token_file(home / "stored_tokens"):
        found.update(_STORED.findall(raw))
    return tuple(sorted((s for s in found if len(s) >= MIN_LENGTH), key=len, reverse=True))


def _token_file(path: Path) -> bytes | None:
    try:
        return bounded_read.read_file(path, _MAX_TOKEN_FILE)
    except (OSError, bounded_read.BoundedReadError):
        return None


def scrub(data: bytes, secrets: tuple[bytes, ...]) -> bytes:
    """`data` with each secret value replaced by REPLACEMENT."""
    for secret in secrets:
        data = data.replace(secret, REPLACEMENT)
    return data


def scrub_tail(data: bytes, secrets: tuple[bytes, ...]) -> bytes:
    """`data`, the end of a longer log, scrubbed: also a secret's end where the cut fell inside it."""
    data = scrub(data, secrets)
    for secret in secrets:
        for length in range(len(secret) - 1, 3, -1):
            if data.startswith(secret[-length:]):
                return REPLACEMENT + data[length:]
    return data


def copy_scrubbed(source: Path, target: Path, limit: int, secrets: tuple[bytes, ...] | None = None) -> bool:
    """Copy the log `source` (a regular file of at most `limit` bytes, copied by builder.bounded_read: never through
    a link) to the new file `target`, scrubbed, in chunks; False (nothing left behind) when it is missing, a link,
    or too large."""
    target = Path(target)
    raw = target.with_name(f".{target.name}.unscrubbed")
    try:
        bounded_read.copy_file(source, raw, limit)
    except (OSError, bounded_read.BoundedReadError):
        raw.unlink(missing_ok=True)
        return False
    try:
        scrubber = Scrubber(known_secrets() if secrets is None else secrets)
        with open(raw, "rb") as src, open(target, "xb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(scrubber.feed(chunk))
            dst.write(scrubber.flush())
    finally:
        raw.unlink(missing_ok=True)
    return True


class Scrubber:
    """Scrubs a stream: `feed` returns what is safe to keep and show now, holding back as many bytes as could
    begin a secret; `flush` returns the rest at the end."""

    def __init__(self, secrets: tuple[bytes, ...]):
        self.secrets = tuple(sorted(set(secrets), key=len, reverse=True))
        self._hold = max(map(len, self.secrets), default=1) - 1
        self._pending = b""

    def feed(self, data: bytes) -> bytes:
        if not self.secrets:
            return data
        buffer = scrub(self._pending + data, self.secrets)
        cut = max(len(buffer) - self._hold, 0)
        self._pending = buffer[cut:]
        return buffer[:cut]

    def flush(self) -> bytes:
        rest, self._pending = self._pending, b""
        return scrub(rest, self.secrets)
