"""Signed attestations of published runs: an in-toto Statement v1 in a DSSE envelope, signed with an SSH key.

The statement's subjects are the sha256 of `result.json` and the run's image digest (or SIF file); its
predicate (type `PREDICATE_TYPE`) holds the envbuild version, the exact commands, a hardware summary and
the time. The signature is OpenSSH's `ssh-keygen -Y sign -n envbuild` over the DSSE pre-authentication
encoding (PAE) of the payload, the way git signs commits; the DSSE `sig` field carries the binary SSHSIG
blob (OpenSSH PROTOCOL.sshsig) and `keyid` the key's SHA256 fingerprint (a hint, never trusted).

Identity comes from our own records, never from the signature: results/allowed_signers is read by our
strict parser (builder.attest.allowed_signers), the signing key is looked up there byte for byte, and the
principal is the one that line names. `ssh-keygen -Y verify` then checks only the signature, against a
one-line allowed_signers file written from that line, and the optional revocation list (`-r`: public keys
or a KRL). The key's window (`valid-after`/`valid-before`) is checked at the statement's `signed_at`, as git
checks a commit's time; `signed_at` must not lie before the run finished nor after now (CLOCK_SKEW_S
allowance). Every JSON document is read by builder.strict_json (no BOM, no duplicate keys). Each
failed check raises its own `VerificationFailure` subclass; input that cannot be read or parsed raises
`AttestationInputError`. Imports nothing from builder but builder.paths, builder.strict_json and builder.store.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from typing import TYPE_CHECKING

from builder.attest import allowed_signers as signers_file
from builder import strict_json
from builder.paths import RESULTS_DIR, file_sha256, write_text_atomic
from workload.result import RESULT_FILE  # the workload writes it

if TYPE_CHECKING:  # securesystemslib loads in ~0.1 s: only the commands that sign or verify pay for it
    from securesystemslib.dsse import Envelope

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE = "urn:envbuild:predicate:run:v1"
NAMESPACE = "envbuild"
#: The attestation's file name, next to the result.json it covers: in-toto's bundle name for a file (`<file>.intoto.jsonl`,
#: spec/v1/bundle.md), holding exactly one DSSE envelope.
ATTESTATION_NAME = "result.json.intoto.jsonl"
IMAGE_SUBJECT = "image"
SIF_SUBJECT = "sif"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
_MAX_ENVELOPE = 1 << 20
MAX_RESULT_BYTES = strict_json.MAX_RESULT_BYTES
#: Clock allowance between the signer's clock, the run's and this machine's.
CLOCK_SKEW_S = 300
#: The published results of this source tree, and who may sign them.
ALLOWED_SIGNERS = RESULTS_DIR / "allowed_signers"
REVOKED_SIGNERS = RESULTS_DIR / "revoked_signers"


class AttestationInputError(Exception):
    """The attestation or a file it names cannot be read or parsed (bad input, exit 2)."""


class VerificationFailure(Exception):
    """An attestation that was read but does not verify (exit 1); `check` names the check that failed."""

    check = "verification"


class BadPayloadType(VerificationFailure):
    check = "payload_type"


class WrongNamespace(VerificationFailure):
    check = "namespace"


class UnknownSigner(VerificationFailure):
    check = "signer"


class KeyOutsideValidity(VerificationFailure):
    check = "validity"


class BadSignature(VerificationFailure):
    check = "signature"


class RevokedKey(VerificationFailure):
    check = "revocation"


class InvalidStatement(VerificationFailure):
    check = "statement"


class ResultTampered(VerificationFailure):
    check = "result_digest"


class ImageDigestMismatch(VerificationFailure):
    check = "image_digest"


@dataclass(frozen=True)
class Verified:
    """What a verified attestation vouches for."""

    principal: str
    fingerprint: str
    statement: dict
    envelope: str  # the DSSE envelope, one JSON line


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def hardware_summary(result: dict) -> dict:
    """GPU model and count, driver and kernel, as the result recorded them (null where it did not)."""
    hardware = result.get("hardware") if isinstance(result.get("hardware"), dict) else {}
    host = result.get("host") if isinstance(result.get("host"), dict) else {}
    return {
        "gpu_model": hardware.get("gpu_name"),
        "gpu_count": hardware.get("gpu_count"),
        "arch": hardware.get("arch"),
        "vendor": hardware.get("vendor"),
        "driver": host.get("amdgpu_version"),
        "kernel": host.get("kernel"),
        "os": host.get("os"),
    }


def image_digest(result: dict) -> str | None:
    """The hex sha256 of the run's container image, or None for a run without one (`--local`)."""
    image = result.get("image") if isinstance(result.get("image"), dict) else {}
    digest = image.get("digest")
    if isinstance(digest, str) and digest.startswith("sha256:") and _SHA256.fullmatch(digest[7:]):
        return digest[7:]
    return None


def make_statement(
    result_path: Path,
    *,
    commands: list[str],
    envbuild_version: str,
    sif_path: Path | None = None,
    image_sha256: str | None = None,
    signed_at: str | None = None,
) -> dict:
    """The in-toto Statement v1 for the run in `result_path` (its image digest is read from the result unless
    `image_sha256` is given)."""
    try:
        raw = Path(result_path).read_bytes()
        result = strict_json.loads(raw)
    except (OSError, ValueError) as exc:
        raise AttestationInputError(f"{result_path}: {exc}") from exc
    if not isinstance(result, dict):
        raise AttestationInputError(f"{result_path}: not a result (a JSON object)")
    subjects = [{"name": RESULT_FILE, "digest": {"sha256": hashlib.sha256(raw).hexdigest()}}]
    image = image_sha256 or image_digest(result)
    if image:
        subjects.append({"name": IMAGE_SUBJECT, "digest": {"sha256": image}})
    if sif_path is not None:
        try:
            subjects.append({"name": SIF_SUBJECT, "digest": {"sha256": file_sha256(sif_path)}})
        except OSError as exc:
            raise AttestationInputError(f"{sif_path}: {exc}") from exc
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "envbuild_version": envbuild_version,
            "commands": list(commands),
            "run_id": result.get("run_id"),
            "status": result.get("status"),
            "hardware": hardware_summary(result),
            "measured_at": result.get("finished_at"),
            "signed_at": signed_at or utc_now(),
        },
    }


def _ssh_keygen(args: list[str], data: bytes | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["ssh-keygen", *args], input=data, capture_output=True, timeout=60)
    except FileNotFoundError as exc:
        raise AttestationInputError("ssh-keygen is not installed: install OpenSSH (built and run with 9.2p1)") from exc
    except subprocess.TimeoutExpired as exc:
        raise AttestationInputError(
            f"ssh-keygen {args[1]} did not finish in 60 s (a key waiting for a passphrase?)"
        ) from exc


def _dearmor(text: str) -> bytes:
    lines = [line.strip() for line in text.strip().splitlines()]
    if len(lines) < 3 or lines[0] != "-----BEGIN SSH SIGNATURE-----" or lines[-1] != "-----END SSH SIGNATURE-----":
        raise AttestationInputError("ssh-keygen wrote no SSH signature")
    return base64.b64decode("".join(lines[1:-1]))


def _armor(blob: bytes) -> str:
    text = base64.b64encode(blob).decode()
    return (
        "\n".join(
            [
                "-----BEGIN SSH SIGNATURE-----",
                *(text[i : i + 70] for i in range(0, len(text), 70)),
                "-----END SSH SIGNATURE-----",
            ]
        )
        + "\n"
    )


def _fingerprint(public_blob: bytes) -> str:
    return "SHA256:" + base64.b64encode(hashlib.sha256(public_blob).digest()).decode().rstrip("=")


def sign_statement(statement: dict, key: Path) -> dict:
    """The DSSE envelope (as a dict) of `statement`, signed by `ssh-keygen -Y sign -n envbuild -f KEY` over its PAE.

    KEY is a private key file, or a public key whose private half is in ssh-agent (as for git)."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import Signature

    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    envelope = Envelope(payload=payload, payload_type=PAYLOAD_TYPE, signatures={})
    if not Path(key).is_file():
        raise AttestationInputError(f"{key}: no such key file")
    proc = _ssh_keygen(["-Y", "sign", "-n", NAMESPACE, "-f", str(key)], envelope.pae())
    if proc.returncode != 0:
        raise AttestationInputError(
            f"ssh-keygen could not sign with {key}: {proc.stderr.decode(errors='replace').strip()}"
        )
    blob = _dearmor(proc.stdout.decode())
    public_blob, _ = _parse_sshsig(blob)
    envelope.signatures[_fingerprint(public_blob)] = Signature(keyid=_fingerprint(public_blob), sig=blob.hex())
    return envelope.to_dict()


def write_attestation(envelope: dict, path: Path) -> None:
    """One envelope, one JSON line (the in-toto `.intoto.jsonl` convention)."""
    write_text_atomic(Path(path), json.dumps(envelope, sort_keys=True) + "\n")


def _read_string(blob: bytes, pos: int) -> tuple[bytes, int]:
    if pos + 4 > len(blob):
        raise ValueError("truncated")
    size = int.from_bytes(blob[pos : pos + 4], "big")
    if pos + 4 + size > len(blob):
        raise ValueError("truncated")
    return blob[pos + 4 : pos + 4 + size], pos + 4 + size


def _parse_sshsig(blob: bytes) -> tuple[bytes, str]:
    """(public key blob, namespace) of an SSHSIG blob (OpenSSH PROTOCOL.sshsig)."""
    if not blob.startswith(b"SSHSIG") or len(blob) < 10:
        raise BadSignature("the signature is not an SSH signature (no SSHSIG magic)")
    try:
        public_blob, pos = _read_string(blob, 10)
        namespace, pos = _read_string(blob, pos)
        return public_blob, namespace.decode("utf-8", errors="replace")
    except ValueError as exc:
        raise BadSignature(f"the SSH signature is malformed ({exc})") from exc


def load_envelope(path: Path) -> Envelope:
    """The DSSE envelope in `path` (one JSON line with exactly one signature); AttestationInputError if not."""
    try:
        raw = strict_json.read_regular(Path(path), _MAX_ENVELOPE)
        if raw.startswith(b"\xef\xbb\xbf"):
            raise ValueError("starts with a UTF-8 byte-order mark: save it as plain UTF-8")
        text = raw.decode("utf-8")
    except (OSError, ValueError) as exc:
        raise AttestationInputError(f"{path}: {exc}") from exc
    return envelope_from_text(text, str(path))


def _envelope_problem(data) -> str:
    """What is wrong with a parsed DSSE envelope, naming the field and what it must hold ("" when nothing)."""
    if not isinstance(data, dict):
        return "the line is not a JSON object with payload, payloadType and signatures"
    for field in ("payload", "payloadType"):
        if not isinstance(data.get(field), str):
            return f"'{field}' is missing or not a string"
    try:
        base64.b64decode(data["payload"], validate=True)
    except (binascii.Error, ValueError) as exc:
        return f"'payload' is not standard base64 ({exc}): it holds the signed statement, base64-encoded"
    signatures = data.get("signatures")
    if not isinstance(signatures, list):
        return "'signatures' is missing or not a list"
    for number, signature in enumerate(signatures):
        if not isinstance(signature, dict):
            return f"'signatures[{number}]' is not an object with keyid and sig"
        for field, what in (("keyid", "the signing key's SHA256 fingerprint"), ("sig", "the SSH signature")):
            if not isinstance(signature.get(field), str):
                return f"'signatures[{number}].{field}' is missing or not a string (it holds {what})"
    return ""


def envelope_from_text(text: str, where: str = "attestation") -> Envelope:
    """The DSSE envelope in `text` (one JSON line, exactly one signature); AttestationInputError if not."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import FormatError

    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise AttestationInputError(f"{where}: expected one DSSE envelope (one JSON line), found {len(lines)} lines")
    try:
        data = strict_json.loads(lines[0])
        if wrong := _envelope_problem(data):
            raise AttestationInputError(
                f"{where}: not a DSSE envelope: {wrong}; sign the result again "
                "(`envbuild matrix sign`) rather than editing the attestation"
            )
        envelope = Envelope.from_dict({**data, "signatures": [dict(s) for s in data["signatures"]]})
    except AttestationInputError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error, FormatError) as exc:
        raise AttestationInputError(f"{where}: not a DSSE envelope: {exc}") from exc
    if len(envelope.signatures) != 1:
        raise AttestationInputError(f"{where}: expected exactly one signature, found {len(envelope.signatures)}")
    return envelope


def _utc(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def _stamp(value) -> float | None:
    """Seconds since the epoch of a YYYY-MM-DDTHH:MM:SSZ time, None for anything else."""
    try:
        return _utc(value).timestamp() if isinstance(value, str) and _TIME.fullmatch(value) else None
    except ValueError:
        return None


def signed_at(statement: dict) -> datetime:
    """The statement's `signed_at` (YYYY-MM-DDTHH:MM:SSZ, required); InvalidStatement when it is not one."""
    stamp = statement["predicate"].get("signed_at")
    if not isinstance(stamp, str) or not _TIME.fullmatch(stamp):
        raise InvalidStatement("the statement has no signed_at time (YYYY-MM-DDTHH:MM:SSZ)")
    try:
        when = _utc(stamp)
    except ValueError:
        raise InvalidStatement(f"signed_at {stamp!r} is not a valid time") from None
    if when.timestamp() > datetime.now(timezone.utc).timestamp() + CLOCK_SKEW_S:
        raise InvalidStatement(f"signed_at {stamp} lies in the future")
    return when


def _signature_blob(envelope: Envelope) -> bytes:
    (signature,) = envelope.signatures.values()
    try:
        return bytes.fromhex(signature.signature)
    except (ValueError, TypeError):
        raise BadSignature("the signature is not an SSH signature (not hex-encoded SSHSIG bytes)") from None


def verify_envelope(
    envelope: Envelope,
    allowed_signers: Path,
    revoked: Path | None = None,
    predicate_type: str = PREDICATE_TYPE,
    subject: str = RESULT_FILE,
    when=None,
) -> tuple[str, str, dict]:
    """Check the payload type, the namespace, the signer (our own allowed_signers line for this exact key), the
    signature, revocation, the statement (of `predicate_type`, naming a `subject` file: a run's result.json unless
    said otherwise) and the key's window at signed_at (or at `when(statement)`, for a predicate that names its own
    time); returns (principal, fingerprint, statement)."""
    if envelope.payload_type != PAYLOAD_TYPE:
        raise BadPayloadType(f"DSSE payloadType is {envelope.payload_type!r}, not {PAYLOAD_TYPE!r}")
    blob = _signature_blob(envelope)
    public_blob, namespace = _parse_sshsig(blob)
    fingerprint = _fingerprint(public_blob)
    if namespace != NAMESPACE:
        raise WrongNamespace(
            f"signed for namespace {namespace!r}, not {NAMESPACE!r} (ssh-keygen -Y sign -n {NAMESPACE})"
        )
    try:
        signers = signers_file.load(allowed_signers)
    except signers_file.AllowedSignersError as exc:
        raise AttestationInputError(str(exc)) from None
    if revoked is not None and not revoked.is_file():
        raise AttestationInputError(f"{revoked}: no revocation list")
    lines = signers_file.signers_of(signers, public_blob)
    if not lines:
        raise UnknownSigner(f"key {fingerprint} is not in {allowed_signers}")
    line = lines[0]
    principal = line.principal
    with tempfile.TemporaryDirectory(prefix="envbuild-verify-") as tmp:
        sig_file, one_line = Path(tmp) / "sig", Path(tmp) / "allowed_signers"
        sig_file.write_text(_armor(blob))
        one_line.write_text(f'{principal} namespaces="{NAMESPACE}" {line.public_key}\n')
        base = ["-Y", "verify", "-f", str(one_line), "-I", principal, "-n", NAMESPACE, "-s", str(sig_file)]
        checked = _ssh_keygen(base, envelope.pae())
        if checked.returncode != 0:
            raise BadSignature(
                f"signature by {principal} ({fingerprint}) does not match the envelope: "
                f"{checked.stderr.decode(errors='replace').strip() or 'ssh-keygen -Y verify failed'}"
            )
        if revoked is not None:
            checked = _ssh_keygen([*base, "-r", str(revoked)], envelope.pae())
            if checked.returncode != 0:
                raise RevokedKey(f"key {fingerprint} of {principal} is revoked ({revoked})")
    try:
        statement = strict_json.loads(envelope.payload)
    except ValueError as exc:
        raise InvalidStatement(f"the signed payload is not JSON as this project reads it: {exc}") from exc
    _check_statement(statement, predicate_type, subject)
    when = (when or signed_at)(statement)
    if not any(candidate.valid_at(when) for candidate in lines):
        raise KeyOutsideValidity(
            f"key {fingerprint} is in {allowed_signers} but not valid at "
            f"{when:%Y-%m-%dT%H:%M:%SZ} (valid-after/valid-before of line {line.number})"
        )
    return principal, fingerprint, statement


def _check_statement(statement, predicate_type: str = PREDICATE_TYPE, subject: str = RESULT_FILE) -> None:
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise InvalidStatement(f"the payload is not an in-toto Statement v1 (_type {STATEMENT_TYPE})")
    if statement.get("predicateType") != predicate_type:
        raise InvalidStatement(f"predicateType is {statement.get('predicateType')!r}, not {predicate_type!r}")
    subjects = statement.get("subject")
    if (
        not isinstance(subjects, list)
        or not subjects
        or not all(
            isinstance(s, dict)
            and isinstance(s.get("name"), str)
            and isinstance(s.get("digest"), dict)
            and isinstance(s["digest"].get("sha256"), str)
            and _SHA256.fullmatch(s["digest"]["sha256"])
            for s in subjects
        )
    ):
        raise InvalidStatement("the statement's subjects are not name + sha256 digest pairs")
    names = [s["name"] for s in subjects]
    if len(set(names)) != len(names) or subject not in names:
        raise InvalidStatement(f"the statement needs one {subject} subject and no duplicate names")
    if not isinstance(statement.get("predicate"), dict):
        raise InvalidStatement("the statement has no predicate")


def subject_digests(statement: dict) -> dict[str, str]:
    return {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}


def check_subjects(statement: dict, result_path: Path, raw: bytes) -> None:
    """Every subject matches: result.json's bytes `raw` (read from `result_path`), and the image digest the result
    names."""
    digests = subject_digests(statement)
    actual = hashlib.sha256(raw).hexdigest()
    if actual != digests[RESULT_FILE]:
        raise ResultTampered(
            f"sha256 {actual} of {Path(result_path).name} is not the attested {digests[RESULT_FILE]}: "
            "the result changed after it was signed"
        )
    try:
        result = strict_json.loads(raw)
    except ValueError as exc:
        raise AttestationInputError(f"{result_path}: {exc}") from exc
    if not isinstance(result, dict):
        raise AttestationInputError(f"{result_path}: not a result (a JSON object)")
    predicate = statement["predicate"]
    for key, value in (("run_id", result.get("run_id")), ("status", result.get("status"))):
        if predicate.get(key) != value:
            raise InvalidStatement(f"the statement's {key} {predicate.get(key)!r} is not the result's {value!r}")
    finished = result.get("finished_at")
    if _stamp(finished) is not None and signed_at(statement).timestamp() < _stamp(finished) - CLOCK_SKEW_S:
        raise InvalidStatement(f"signed_at {predicate['signed_at']} lies before the run finished ({finished})")
    in_result = image_digest(result)
    attested = digests.get(IMAGE_SUBJECT)
    if in_result != attested:
        raise ImageDigestMismatch(
            f"the result's image digest {in_result or '(none)'} is not the attested image {attested or '(none)'}"
        )


def verify(
    attestation: Path,
    allowed_signers: Path,
    revoked: Path | None = None,
    result_path: Path | None = None,
    result_bytes: bytes | None = None,
) -> Verified:
    """Verify the attestation file and the result.json beside it (or `result_path`; `result_bytes`: its content,
    as the caller read it, so that what is verified is what the caller goes on to use)."""
    attestation = Path(attestation)
    result_path = Path(result_path) if result_path is not None else attestation.with_name(RESULT_FILE)
    if result_bytes is None:
        if not result_path.is_file():
            raise AttestationInputError(f"{result_path}: no result file next to {attestation}")
        try:
            result_bytes = strict_json.read_regular(result_path, MAX_RESULT_BYTES)
        except (OSError, ValueError) as exc:
            raise AttestationInputError(f"{result_path}: {exc}") from exc
    envelope = load_envelope(attestation)
    principal, fingerprint, statement = verify_envelope(
        envelope, Path(allowed_signers), Path(revoked) if revoked is not None else None
    )
    check_subjects(statement, result_path, result_bytes)
    return Verified(
        principal=principal,
        fingerprint=fingerprint,
        statement=statement,
        envelope=json.dumps(envelope.to_dict(), sort_keys=True),
    )


def reverify_stored(
    envelope_text: str | None, run_id: str, allowed_signers: Path, revoked: Path | None = None
) -> Verified | VerificationFailure:
    """A stored run's attestation checked again against the current allowed_signers and revocation list (its
    result.json bytes are not stored, so the statement must name the run's run_id). AttestationInputError for a
    broken allowed_signers or revocation list; a stored envelope that no longer parses is a failure."""
    try:
        envelope = envelope_from_text(envelope_text or "", "stored attestation")
    except AttestationInputError as exc:
        return InvalidStatement(str(exc))
    try:
        principal, fingerprint, statement = verify_envelope(
            envelope, Path(allowed_signers), Path(revoked) if revoked is not None else None
        )
    except VerificationFailure as exc:
        return exc
    if statement["predicate"].get("run_id") != run_id:
        return InvalidStatement(f"the stored attestation names run {statement['predicate'].get('run_id')!r}")
    return Verified(principal=principal, fingerprint=fingerprint, statement=statement, envelope=envelope_text)


def attestation_beside(result_path: Path) -> Path | None:
    """The attestation next to a result.json, if there is one."""
    path = Path(result_path).with_name(ATTESTATION_NAME)
    return path if path.is_file() else None


def attest(
    result_path: Path,
    key: Path,
    *,
    commands: list[str],
    envbuild_version: str,
    sif_path: Path | None = None,
    out: Path | None = None,
) -> Path:
    """Sign the run in `result_path` and write its attestation beside it (or to `out`); returns the path."""
    statement = make_statement(result_path, commands=commands, envbuild_version=envbuild_version, sif_path=sif_path)
    envelope = sign_statement(statement, key)
    target = Path(out) if out is not None else Path(result_path).with_name(ATTESTATION_NAME)
    write_attestation(envelope, target)
    return target
