"""Attestations: real ed25519 keys made by ssh-keygen in tmp_path, real `ssh-keygen -Y sign/verify`.

One test per check: each builds an attestation that only that check rejects and asserts its class and
message, so switching the check off makes exactly that test fail."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.matrix import attest, provenance
from builder.paths import file_sha256
from repo import REPO_ROOT

CPU_RESULT = REPO_ROOT / "results" / "cpu-torch2.13-py3.11" / "container-smoke" / "result.json"
COMMANDS = ["envbuild run workload --image envbuild/cpu-torch2.13-py3.11:2a47823c34d3 --out run-smoke"]


def make_key(directory: Path, name: str) -> Path:
    key = directory / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key


def public_line(key: Path) -> str:
    kind, data = Path(f"{key}.pub").read_text().split()[:2]
    return f"{kind} {data}"


def key_fingerprint(key: Path) -> str:
    return subprocess.run(["ssh-keygen", "-lf", f"{key}.pub"], capture_output=True, text=True,
                          check=True).stdout.split()[1]


@pytest.fixture()
def run(tmp_path, monkeypatch):
    """A published run folder, a signing key and an allowed_signers file that trusts it (the key stands in for
    this project's CI key: bound to envbuild-ci in PROJECT_SIGNERS for the test)."""
    folder = tmp_path / "results" / "cpu" / "smoke"
    folder.mkdir(parents=True)
    shutil.copyfile(CPU_RESULT, folder / "result.json")
    keys = tmp_path / "keys"
    keys.mkdir()
    key = make_key(keys, "ci")
    monkeypatch.setitem(provenance.PROJECT_SIGNERS, "envbuild-ci", provenance.PROJECT_SIGNERS["envbuild-ci"] | {key_fingerprint(key)})
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'envbuild-ci namespaces="envbuild" {public_line(key)}\n')
    return folder, key, allowed


def sign(folder: Path, key: Path, **kwargs) -> Path:
    return attest.attest(folder / "result.json", key, commands=COMMANDS, envbuild_version="0.1.0", **kwargs)


def envelope_of(path: Path) -> dict:
    return json.loads(path.read_text())


def statement_of(path: Path) -> dict:
    return json.loads(base64.b64decode(envelope_of(path)["payload"]))


def test_pae_is_dsse_v1():
    """The bytes that are signed: DSSE protocol v1.0.0's test vector (secure-systems-lab/dsse protocol.md)."""
    from securesystemslib.dsse import Envelope

    envelope = Envelope(payload=b"hello world", payload_type="http://example.com/HelloWorld", signatures={})
    assert envelope.pae() == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


def test_good_signature_verifies_and_names_signer(run):
    folder, key, allowed = run
    path = sign(folder, key)
    assert path == folder / attest.ATTESTATION_NAME
    verified = attest.verify(path, allowed)
    assert verified.principal == "envbuild-ci"
    fingerprint = subprocess.run(["ssh-keygen", "-lf", f"{key}.pub"], capture_output=True, text=True,
                                 check=True).stdout.split()[1]
    assert verified.fingerprint == fingerprint
    statement = verified.statement
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == attest.PREDICATE_TYPE
    digests = attest.subject_digests(statement)
    assert digests["result.json"] == file_sha256(folder / "result.json")
    assert digests["image"] == json.loads(CPU_RESULT.read_text())["image"]["digest"].removeprefix("sha256:")
    predicate = statement["predicate"]
    assert predicate["commands"] == COMMANDS and predicate["envbuild_version"] == "0.1.0"
    assert predicate["hardware"]["gpu_count"] == 0 and predicate["hardware"]["kernel"].startswith("6.")
    # the signature is over the DSSE PAE: ssh-keygen itself accepts it for those bytes
    env = envelope_of(path)
    pae = b"DSSEv1 %d %b %d %b" % (len(env["payloadType"]), env["payloadType"].encode(),
                                   len(base64.b64decode(env["payload"])), base64.b64decode(env["payload"]))
    sig = folder / "sig"
    sig.write_text(attest._armor(base64.b64decode(env["signatures"][0]["sig"])))
    subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(allowed), "-I", "envbuild-ci", "-n", "envbuild",
                    "-s", str(sig)], input=pae, check=True, capture_output=True)


def test_tampered_result_one_byte(run):
    folder, key, allowed = run
    path = sign(folder, key)
    raw = bytearray((folder / "result.json").read_bytes())
    at = raw.index(b'"wall_time_s": 128.9') + len(b'"wall_time_s": 128.9')
    raw[at] = ord("2") if raw[at] != ord("2") else ord("3")
    (folder / "result.json").write_bytes(bytes(raw))
    with pytest.raises(attest.ResultTampered, match="changed after it was signed"):
        attest.verify(path, allowed)


def test_swapped_image_digest(run):
    folder, key, allowed = run
    other = "0" * 64
    statement = attest.make_statement(folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0",
                                      image_sha256=other)
    path = folder / attest.ATTESTATION_NAME
    attest.write_attestation(attest.sign_statement(statement, key), path)
    with pytest.raises(attest.ImageDigestMismatch, match=f"attested image {other}"):
        attest.verify(path, allowed)


def test_unknown_signer(run, tmp_path):
    folder, _, allowed = run
    stranger = make_key(tmp_path / "keys", "stranger")
    path = sign(folder, stranger)
    with pytest.raises(attest.UnknownSigner, match="is not in"):
        attest.verify(path, allowed)


@pytest.mark.parametrize("window", ['valid-before="20200101"', 'valid-after="29990101"'])
def test_key_outside_validity_window(run, window):
    folder, key, allowed = run
    allowed.write_text(f'envbuild-ci namespaces="envbuild",{window} {public_line(key)}\n')
    path = sign(folder, key)
    with pytest.raises(attest.KeyOutsideValidity, match="not valid at"):
        attest.verify(path, allowed)


def test_validity_is_checked_at_signing_time(run):
    """A key retired after it signed (valid-before later than signed_at) still verifies that attestation."""
    folder, key, allowed = run
    result = json.loads((folder / "result.json").read_text())
    result["finished_at"] = "2025-12-31T23:00:00Z"
    (folder / "result.json").write_text(json.dumps(result))
    statement = attest.make_statement(folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0",
                                      signed_at="2026-01-01T00:00:00Z")
    path = folder / attest.ATTESTATION_NAME
    attest.write_attestation(attest.sign_statement(statement, key), path)
    allowed.write_text(f'envbuild-ci namespaces="envbuild",valid-before="20260601" {public_line(key)}\n')
    assert attest.verify(path, allowed).principal == "envbuild-ci"


@pytest.mark.parametrize("listing", ["public", "krl"])
def test_revoked_key(run, tmp_path, listing):
    folder, key, allowed = run
    path = sign(folder, key)
    revoked = tmp_path / "revoked_signers"
    if listing == "public":
        revoked.write_text(public_line(key) + "\n")
    else:
        subprocess.run(["ssh-keygen", "-q", "-k", "-f", str(revoked), f"{key}.pub"], check=True)
    other = tmp_path / "other_revoked"
    other.write_text(public_line(make_key(tmp_path / "keys", "old")) + "\n")
    assert attest.verify(path, allowed, other).principal == "envbuild-ci"
    with pytest.raises(attest.RevokedKey, match="is revoked"):
        attest.verify(path, allowed, revoked)


def test_signature_made_with_another_namespace(run):
    folder, key, allowed = run
    statement = attest.make_statement(folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0")
    envelope = attest.sign_statement(statement, key)
    pae = b"DSSEv1 %d %b %d %b" % (len(attest.PAYLOAD_TYPE), attest.PAYLOAD_TYPE.encode(),
                                   len(base64.b64decode(envelope["payload"])), base64.b64decode(envelope["payload"]))
    proc = subprocess.run(["ssh-keygen", "-Y", "sign", "-n", "git", "-f", str(key)], input=pae,
                          capture_output=True, check=True)
    envelope["signatures"][0]["sig"] = base64.b64encode(attest._dearmor(proc.stdout.decode())).decode()
    path = folder / attest.ATTESTATION_NAME
    attest.write_attestation(envelope, path)
    with pytest.raises(attest.WrongNamespace, match="namespace 'git'"):
        attest.verify(path, allowed)


def test_bad_payload_type(run):
    """A correctly signed envelope whose payloadType is not in-toto's."""
    folder, key, allowed = run
    statement = attest.make_statement(folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0")
    original = attest.PAYLOAD_TYPE
    try:
        attest.PAYLOAD_TYPE = "application/json"
        envelope = attest.sign_statement(statement, key)
    finally:
        attest.PAYLOAD_TYPE = original
    assert envelope["payloadType"] == "application/json"
    path = folder / attest.ATTESTATION_NAME
    attest.write_attestation(envelope, path)
    with pytest.raises(attest.BadPayloadType, match="payloadType is 'application/json'"):
        attest.verify(path, allowed)


def test_bad_signature_over_an_edited_payload(run):
    folder, key, allowed = run
    path = sign(folder, key)
    envelope = envelope_of(path)
    payload = base64.b64decode(envelope["payload"]).replace(b"--out run-smoke", b"--out run-smokE")
    envelope["payload"] = base64.b64encode(payload).decode()
    attest.write_attestation(envelope, path)
    with pytest.raises(attest.BadSignature, match="does not match the envelope"):
        attest.verify(path, allowed)


@pytest.mark.parametrize("content", ["", "not json\n", '{"payload": "x"}\n', "{}\n{}\n",
                                     '{"payload": "!!", "payloadType": "a", "signatures": []}\n'])
def test_unparseable_envelope_is_bad_input(run, content):
    folder, _, allowed = run
    path = folder / attest.ATTESTATION_NAME
    path.write_text(content)
    with pytest.raises(attest.AttestationInputError):
        attest.verify(path, allowed)


def test_missing_files_are_bad_input(run, tmp_path):
    folder, key, allowed = run
    path = sign(folder, key)
    with pytest.raises(attest.AttestationInputError, match="no allowed_signers file"):
        attest.verify(path, tmp_path / "nowhere")
    with pytest.raises(attest.AttestationInputError, match="no such key file"):
        sign(folder, tmp_path / "no-key")
    (folder / "result.json").unlink()
    with pytest.raises(attest.AttestationInputError, match="no result file"):
        attest.verify(path, allowed)
