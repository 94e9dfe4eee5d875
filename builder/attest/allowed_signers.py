"""results/allowed_signers, read strictly by our own parser: who may sign which results.

A line is `PRINCIPAL [OPTIONS] KEYTYPE BASE64 [COMMENT]` (OpenSSH's allowed-signers layout, `man ssh-keygen`),
narrowed to what this project needs, so that identity never depends on OpenSSH's pattern matching:

- exactly one principal, a plain name (`_PRINCIPAL`): no `*`/`?` patterns, no `!` negation, no lists;
- options only `namespaces="..."` (which must include `envbuild`), `valid-after="..."` and `valid-before="..."`
  (YYYYMMDD[HHMM[SS]][Z], read as UTC), each at most once: `cert-authority` and anything else is refused;
- a plain public key (no certificate types), whose encoded type matches KEYTYPE;
- the principals this project reserves (`provenance.PROJECT_SIGNERS`, in any letter case) only as spelled there
  and with the keys bound to them there;
- one key on two lines must name one principal.

Anything else raises `AllowedSignersError` naming the line (bad input: exit 2). Imports nothing from builder
but builder.store.provenance.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from builder.store import provenance

NAMESPACE = "envbuild"
_PRINCIPAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")
KEY_TYPES = frozenset(
    {
        "ssh-ed25519",
        "ssh-rsa",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    }
)
_OPTION = re.compile(r'(?P<name>[A-Za-z-]+)(?:="(?P<quoted>[^"]*)"|=(?P<plain>[^,"]*))?(?:,|$)')
_TIME = re.compile(r"(?P<d>[0-9]{8})(?P<hm>[0-9]{4})?(?P<s>[0-9]{2})?Z?")
_NAMESPACE = re.compile(r"[A-Za-z0-9._@-]{1,64}")
_MAX_BYTES = 1 << 20


class AllowedSignersError(ValueError):
    """The allowed_signers file holds something this project does not accept (bad input: exit 2)."""


@dataclass(frozen=True)
class SignerLine:
    """One accepted line: the principal bound to exactly this public key, in this window (UTC)."""

    number: int
    principal: str
    key_type: str
    key_blob: bytes
    valid_after: datetime | None = None
    valid_before: datetime | None = None

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key_blob)

    @property
    def public_key(self) -> str:
        return f"{self.key_type} {base64.b64encode(self.key_blob).decode()}"

    def valid_at(self, when: datetime) -> bool:
        return (self.valid_after is None or when >= self.valid_after) and (
            self.valid_before is None or when <= self.valid_before
        )


def fingerprint(key_blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint of a public key blob."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key_blob).digest()).decode().rstrip("=")


def _validity_time(value: str, where: str) -> datetime:
    match = _TIME.fullmatch(value)
    if not match:
        raise AllowedSignersError(f"{where}: {value!r} is not a time YYYYMMDD[HHMM[SS]][Z]")
    text = match["d"] + (match["hm"] or "0000") + (match["s"] or "00")
    try:
        return datetime.strptime(text, "%Y%m%d%H%M%S").replace(tzinfo=timezone.utc)
    except ValueError:
        raise AllowedSignersError(f"{where}: {value!r} is not a valid date") from None


def _signer_options(text: str, where: str) -> dict[str, str]:
    options: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        match = _OPTION.match(text, pos)
        if not match or match.end() == pos:
            raise AllowedSignersError(f"{where}: cannot read the options {text!r}")
        name = match["name"].lower()
        value = match["quoted"] if match["quoted"] is not None else match["plain"]
        if name == "cert-authority":
            raise AllowedSignersError(
                f"{where}: cert-authority lines are not accepted: list each signer's own public key (results/README.md)"
            )
        if name not in ("namespaces", "valid-after", "valid-before"):
            raise AllowedSignersError(
                f"{where}: unknown option or key type {name[:60]!r} (options: namespaces, valid-after, valid-before)"
            )
        if value is None or name in options:
            raise AllowedSignersError(f"{where}: option {name} needs one value, given once")
        options[name] = value
        pos = match.end()
        if text[pos - 1 : pos] == "," and pos == len(text):
            raise AllowedSignersError(f"{where}: the options end with a comma")
    return options


def parse_line(line: str, number: int, source: str = "allowed_signers") -> SignerLine | None:
    """The signer a line binds, None for a blank or comment line; AllowedSignersError for anything else."""
    where = f"{source} line {number}"
    stripped = line.strip(" \t")
    if not stripped or stripped.startswith("#"):
        return None
    if not stripped.replace("\t", " ").isprintable():
        raise AllowedSignersError(f"{where}: control characters are not accepted")
    if stripped.startswith('"'):
        raise AllowedSignersError(
            f"{where}: principal {stripped.split()[0][:80]!r}... is not one plain name (quoted "
            "principals are not accepted)"
        )
    tokens = stripped.split()
    if len(tokens) < 3:
        raise AllowedSignersError(f"{where}: expected PRINCIPAL [OPTIONS] KEYTYPE BASE64")
    principal, rest = tokens[0], tokens[1:]
    options: dict[str, str] = {}
    if rest[0] not in KEY_TYPES:
        if not rest[0].endswith("-cert-v01@openssh.com"):
            options = _signer_options(rest[0], where)
            rest = rest[1:]
        if not rest or rest[0] not in KEY_TYPES:
            if rest and rest[0].endswith("-cert-v01@openssh.com"):
                raise AllowedSignersError(f"{where}: certificates are not accepted: list the plain public key")
            raise AllowedSignersError(
                f"{where}: {(rest or ['(none)'])[0][:60]!r} is not a key type this project "
                f"accepts ({', '.join(sorted(KEY_TYPES))})"
            )
    if len(rest) < 2:
        raise AllowedSignersError(f"{where}: the key has no base64 part")
    if not _PRINCIPAL.fullmatch(principal):
        raise AllowedSignersError(
            f"{where}: principal {principal[:80]!r} is not one plain name (letters, digits "
            "and ._@+-; no patterns, lists, quotes or negation)"
        )
    key_type, data = rest[0], rest[1]
    try:
        blob = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise AllowedSignersError(f"{where}: the key is not base64") from None
    size = int.from_bytes(blob[:4], "big") if len(blob) >= 4 else -1
    if size < 0 or blob[4 : 4 + size].decode("ascii", "replace") != key_type:
        raise AllowedSignersError(f"{where}: the key's encoded type is not {key_type}")
    namespaces = options.get("namespaces")
    if (
        namespaces is None
        or NAMESPACE not in namespaces.split(",")
        or not all(_NAMESPACE.fullmatch(n) for n in namespaces.split(","))
    ):
        raise AllowedSignersError(f'{where}: give namespaces="{NAMESPACE}" (the key signs results of this project)')
    signer = SignerLine(
        number,
        principal,
        key_type,
        blob,
        _validity_time(options["valid-after"], where) if "valid-after" in options else None,
        _validity_time(options["valid-before"], where) if "valid-before" in options else None,
    )
    reserved = {name.lower(): name for name in provenance.PROJECT_SIGNERS}
    bound = provenance.PROJECT_SIGNERS.get(principal) if reserved.get(principal.lower()) == principal else None
    if principal.lower() in reserved and (bound is None or signer.fingerprint not in bound):
        raise AllowedSignersError(
            f"{where}: principal {principal} is reserved for this project's own keys "
            f"(builder/store/provenance.py PROJECT_SIGNERS); {signer.fingerprint} is not one"
        )
    return signer


def parse(text: str, source: str = "allowed_signers") -> list[SignerLine]:
    """Every signer line of an allowed_signers file's text."""
    if text.startswith("\ufeff"):
        raise AllowedSignersError(f"{source} line 1: starts with a byte-order mark: save it as plain UTF-8")
    signers: list[SignerLine] = []
    by_key: dict[bytes, SignerLine] = {}
    for number, line in enumerate(text.split("\n"), 1):
        signer = parse_line(line, number, source)
        if signer is None:
            continue
        first = by_key.setdefault(signer.key_blob, signer)
        if first.principal != signer.principal:
            raise AllowedSignersError(
                f"{source} line {number}: key {signer.fingerprint} is already bound to "
                f"{first.principal} on line {first.number}: one key, one principal"
            )
        signers.append(signer)
    return signers


def load(path: Path) -> list[SignerLine]:
    """The signers of the file at `path`; AllowedSignersError when it cannot be read or holds a bad line."""
    path = Path(path)
    try:
        if not path.is_file():
            raise AllowedSignersError(f"{path}: no allowed_signers file")
        if path.stat().st_size > _MAX_BYTES:
            raise AllowedSignersError(f"{path}: larger than {_MAX_BYTES} bytes")
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AllowedSignersError(f"{path}: {exc}") from None
    return parse(text, str(path))


def signers_of(signers: list[SignerLine], key_blob: bytes) -> list[SignerLine]:
    """The lines that bind exactly this public key (byte for byte; a certificate matches none)."""
    return [s for s in signers if s.key_blob == key_blob]
