"""Attestations: real ed25519 keys made by ssh-keygen in tmp_path, real `ssh-keygen -Y sign/verify`.

One test per check: each builds an attestation that only that check rejects and asserts its class and
message, so switching the check off makes exactly that test fail."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.attest import signing as attest
from builder.store import provenance
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
    return subprocess.run(
        ["ssh-keygen", "-lf", f"{key}.pub"], capture_output=True, text=True, check=True
    ).stdout.split()[1]


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
    monkeypatch.setitem(
        provenance.PROJECT_SIGNERS, "envbuild-ci", provenance.PROJECT_SIGNERS["envbuild-ci"] | {key_fingerprint(key)}
    )
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
    fingerprint = subprocess.run(
        ["ssh-keygen", "-lf", f"{key}.pub"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
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
    pae = b"DSSEv1 %d %b %d %b" % (
        len(env["payloadType"]),
        env["payloadType"].encode(),
        len(base64.b64decode(env["payload"])),
        base64.b64decode(env["payload"]),
    )
    sig = folder / "sig"
    sig.write_text(attest._armor(base64.b64decode(env["signatures"][0]["sig"])))
    subprocess.run(
        ["ssh-keygen", "-Y", "verify", "-f", str(allowed), "-I", "envbuild-ci", "-n", "envbuild", "-s", str(sig)],
        input=pae,
        check=True,
        capture_output=True,
    )


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
    statement = attest.make_statement(
        folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0", image_sha256=other
    )
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
    statement = attest.make_statement(
        folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0", signed_at="2026-01-01T00:00:00Z"
    )
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
    pae = b"DSSEv1 %d %b %d %b" % (
        len(attest.PAYLOAD_TYPE),
        attest.PAYLOAD_TYPE.encode(),
        len(base64.b64decode(envelope["payload"])),
        base64.b64decode(envelope["payload"]),
    )
    proc = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-n", "git", "-f", str(key)], input=pae, capture_output=True, check=True
    )
    envelope["signatures"][0]["sig"] = base64.b64encode(attest._dearmor(proc.stdout.decode())).decode()
    path = folder / attest.ATTESTATION_NAME
    attest.write_attestation(envelope, path)
    with pytest.raises(attest.WrongNamespace, match="namespace 'git'"):
        attest.verify(path, allowed)


@pytest.mark.parametrize("payload_type", ["application/json", "application/vnd.in-toto+jsonl"])  # sorts before, after
def test_bad_payload_type(run, payload_type):
    """A correctly signed envelope whose payloadType is not in-toto's."""
    folder, key, allowed = run
    statement = attest.make_statement(folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0")
    original = attest.PAYLOAD_TYPE
    try:
        attest.PAYLOAD_TYPE = payload_type
        envelope = attest.sign_statement(statement, key)
    finally:
        attest.PAYLOAD_TYPE = original
    assert envelope["payloadType"] == payload_type
    path = folder / attest.ATTESTATION_NAME
    attest.write_attestation(envelope, path)
    with pytest.raises(attest.BadPayloadType, match=f"payloadType is '{re.escape(payload_type)}'"):
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


@pytest.mark.parametrize(
    "content",
    ["", "not json\n", '{"payload": "x"}\n', "{}\n{}\n", '{"payload": "!!", "payloadType": "a", "signatures": []}\n'],
)
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


def _signed(folder: Path, key: Path, statement) -> Path:
    """An attestation of `statement` exactly as given, correctly signed by `key`."""
    path = folder / attest.ATTESTATION_NAME
    attest.write_attestation(attest.sign_statement(statement, key), path)
    return path


def _edit_subjects(*subjects):
    def edit(statement):
        statement["subject"] = list(subjects)

    return edit


_HEX = "ab" * 32
_BAD_STATEMENTS = {
    "an in-toto v0.1 statement": (
        lambda s: s.update(_type="https://in-toto.io/Statement/v0.1"),
        "not an in-toto Statement v1",
    ),
    "no _type": (lambda s: s.pop("_type"), "not an in-toto Statement v1"),
    "a predicate type sorting before ours": (
        lambda s: s.update(predicateType="https://slsa.dev/provenance/v1"),
        "predicateType is 'https://slsa.dev/provenance/v1', not",
    ),
    "a predicate type sorting after ours": (
        lambda s: s.update(predicateType="urn:example:run:v1"),
        "predicateType is 'urn:example:run:v1', not",
    ),
    "no predicate type": (lambda s: s.pop("predicateType"), "predicateType is None, not"),
    "no subjects": (lambda s: s.pop("subject"), "subjects are not name + sha256"),
    "subjects not a list": (
        lambda s: s.update(subject={"name": "result.json", "digest": {"sha256": _HEX}}),
        "subjects are not name + sha256",
    ),
    "an empty subject list": (_edit_subjects(), "subjects are not name + sha256"),
    "a subject that is a string": (_edit_subjects("result.json"), "subjects are not name + sha256"),
    "a subject without a name": (_edit_subjects({"digest": {"sha256": _HEX}}), "subjects are not name + sha256"),
    "a subject named by a number": (
        _edit_subjects({"name": 7, "digest": {"sha256": _HEX}}),
        "subjects are not name + sha256",
    ),
    "a digest that is a string": (
        _edit_subjects({"name": "result.json", "digest": _HEX}),
        "subjects are not name + sha256",
    ),
    "a digest without sha256": (
        _edit_subjects({"name": "result.json", "digest": {"sha512": _HEX * 2}}),
        "subjects are not name + sha256",
    ),
    "a sha256 that is a number": (
        _edit_subjects({"name": "result.json", "digest": {"sha256": 12}}),
        "subjects are not name + sha256",
    ),
    "a sha256 in capitals": (
        _edit_subjects({"name": "result.json", "digest": {"sha256": _HEX.upper()}}),
        "subjects are not name + sha256",
    ),
    "a sha256 one digit long": (
        _edit_subjects({"name": "result.json", "digest": {"sha256": _HEX + "0"}}),
        "subjects are not name + sha256",
    ),
    "a sha256 one digit short": (
        _edit_subjects({"name": "result.json", "digest": {"sha256": _HEX[:-1]}}),
        "subjects are not name + sha256",
    ),
    "two result.json subjects": (
        _edit_subjects(
            {"name": "result.json", "digest": {"sha256": _HEX}},
            {"name": "result.json", "digest": {"sha256": "cd" * 32}},
        ),
        "needs one result.json subject and no duplicate names",
    ),
    "two image subjects": (
        lambda s: s["subject"].extend([{"name": "image", "digest": {"sha256": _HEX}}] * 2),
        "needs one result.json subject and no duplicate names",
    ),
    "no result.json subject": (
        _edit_subjects({"name": "results.json", "digest": {"sha256": _HEX}}),
        "needs one result.json subject",
    ),
    "no predicate": (lambda s: s.pop("predicate"), "the statement has no predicate"),
    "a predicate that is a list": (lambda s: s.update(predicate=[]), "the statement has no predicate"),
}


@pytest.mark.parametrize("case", list(_BAD_STATEMENTS))
def test_a_signed_statement_of_the_wrong_shape_is_refused(run, case):
    """Correctly signed by a trusted key, but not the statement this project signs: InvalidStatement, naming why."""
    folder, key, allowed = run
    edit, words = _BAD_STATEMENTS[case]
    statement = attest.make_statement(folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0")
    edit(statement)
    with pytest.raises(attest.InvalidStatement, match=re.escape(words)):
        attest.verify(_signed(folder, key, statement), allowed)


@pytest.mark.parametrize("payload", [["https://in-toto.io/Statement/v1"], "https://in-toto.io/Statement/v1", None])
def test_a_signed_payload_that_is_not_an_object_is_refused(run, payload):
    folder, key, allowed = run
    with pytest.raises(attest.InvalidStatement, match="not an in-toto Statement v1"):
        attest.verify(_signed(folder, key, payload), allowed)


def test_a_statement_with_an_extra_subject_of_its_own_name_verifies(run):
    """Subjects beyond result.json and the image (a SIF, say) are allowed: the shape check is not too strict."""
    folder, key, allowed = run
    statement = attest.make_statement(folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0")
    statement["subject"].append({"name": "sif", "digest": {"sha256": _HEX}})
    assert attest.verify(_signed(folder, key, statement), allowed).statement["subject"][-1]["name"] == "sif"


def _string(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def _with_sshsig(path: Path, blob: bytes) -> Path:
    envelope = envelope_of(path)
    envelope["signatures"][0]["sig"] = base64.b64encode(blob).decode()
    attest.write_attestation(envelope, path)
    return path


@pytest.mark.parametrize(
    "case",
    [
        "nothing after the version",
        "public key cut short",
        "length of the public key cut short",
        "namespace cut short",
        "namespace one byte short",
        "length of the namespace cut short",
    ],
)
def test_a_truncated_ssh_signature_is_a_bad_signature(run, case):
    """SSHSIG blobs (OpenSSH PROTOCOL.sshsig) whose strings run past the end: refused as malformed, never read
    short."""
    folder, key, allowed = run
    path = sign(folder, key)
    public_blob = attest._parse_sshsig(base64.b64decode(envelope_of(path)["signatures"][0]["sig"]))[0]
    head = b"SSHSIG" + (1).to_bytes(4, "big")
    blob = {
        "nothing after the version": head,
        "public key cut short": head + _string(public_blob)[:-1],
        "length of the public key cut short": head + b"\x00\x00\x01",
        "namespace cut short": head + _string(public_blob) + (len(b"envbuild") + 9).to_bytes(4, "big") + b"envbuild",
        "namespace one byte short": head
        + _string(public_blob)
        + (len(b"envbuild") + 1).to_bytes(4, "big")
        + b"envbuild",
        "length of the namespace cut short": head + _string(public_blob) + b"\x00\x00\x00",
    }[case]
    with pytest.raises(attest.BadSignature, match=re.escape("the SSH signature is malformed (truncated)")):
        attest.verify(_with_sshsig(path, blob), allowed)


def test_an_ssh_signature_ending_at_an_empty_namespace_is_read_to_its_last_byte(run):
    """Strings that end exactly at the blob's end are read whole: the namespace is empty, not "truncated"."""
    folder, key, allowed = run
    path = sign(folder, key)
    public_blob = attest._parse_sshsig(base64.b64decode(envelope_of(path)["signatures"][0]["sig"]))[0]
    blob = b"SSHSIG" + (1).to_bytes(4, "big") + _string(public_blob) + _string(b"")
    with pytest.raises(attest.WrongNamespace, match="signed for namespace '', not 'envbuild'"):
        attest.verify(_with_sshsig(path, blob), allowed)


@pytest.mark.parametrize("blob", [b"", b"SSHSIG", b"SSHSIG\x00\x00\x00", b"SSHSIh\x00\x00\x00\x01" + b"\x00" * 40])
def test_a_signature_without_the_sshsig_magic_is_a_bad_signature(run, blob):
    folder, key, allowed = run
    with pytest.raises(attest.BadSignature, match=re.escape("not an SSH signature (no SSHSIG magic)")):
        attest.verify(_with_sshsig(sign(folder, key), blob), allowed)


def test_an_image_digest_on_one_side_only_is_named_in_the_message(run, tmp_path):
    """The result names an image the statement does not (and the other way round): both sides in the message."""
    folder, key, allowed = run
    result = json.loads((folder / "result.json").read_text())
    digest = result["image"]["digest"].removeprefix("sha256:")
    statement = attest.make_statement(folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0")
    statement["subject"] = [s for s in statement["subject"] if s["name"] != attest.IMAGE_SUBJECT]
    with pytest.raises(
        attest.ImageDigestMismatch,
        match=re.escape(f"the result's image digest {digest} is not the attested image (none)"),
    ):
        attest.verify(_signed(folder, key, statement), allowed)
    local = tmp_path / "local"
    local.mkdir()
    del result["image"]
    (local / "result.json").write_text(json.dumps(result))
    statement = attest.make_statement(
        local / "result.json", commands=COMMANDS, envbuild_version="0.1.0", image_sha256=digest
    )
    with pytest.raises(
        attest.ImageDigestMismatch,
        match=re.escape(f"the result's image digest (none) is not the attested image {digest}"),
    ):
        attest.verify(_signed(local, key, statement), allowed)


def test_our_armor_is_the_one_ssh_keygen_writes(run, tmp_path):
    """The signature file handed to `ssh-keygen -Y verify` is byte for byte what `ssh-keygen -Y sign` writes."""
    _, key, _ = run
    for size in (1, 500, 5000):
        data = tmp_path / "data"
        data.write_bytes(b"x" * size)
        subprocess.run(
            ["ssh-keygen", "-q", "-Y", "sign", "-n", "envbuild", "-f", str(key), str(data)],
            check=True,
            capture_output=True,
        )
        written = Path(f"{data}.sig").read_text()
        assert attest._armor(attest._dearmor(written)) == written
        Path(f"{data}.sig").unlink()


@pytest.mark.parametrize("blob", [b"\x01", b"S" * 52, b"S" * 53, bytes(range(256))])
def test_armor_and_dearmor_round_trip(blob):
    """From a one-line body (three lines in all) up: what is armored is read back whole."""
    assert attest._dearmor(attest._armor(blob)) == blob


@pytest.mark.parametrize(
    "text",
    [
        "",
        "-----BEGIN SSH SIGNATURE-----\n-----END SSH SIGNATURE-----\n",
        "-----BEGIN PGP SIGNATURE-----\nAQ==\n-----END SSH SIGNATURE-----\n",
        "-----BEGIN SSH SIGNATURE----- v2\nAQ==\n-----END SSH SIGNATURE-----\n",
        "-----BEGIN SSH SIGNATURE-----\nAQ==\n-----END PGP SIGNATURE-----\n",
        "-----BEGIN SSH SIGNATURE-----\nAQ==\n-----END SSH SIGNATURE----- v2\n",
        "Enter passphrase:\n",
    ],
)
def test_output_of_ssh_keygen_that_is_no_signature_is_refused(text):
    with pytest.raises(attest.AttestationInputError, match="ssh-keygen wrote no SSH signature"):
        attest._dearmor(text)


def test_signing_without_ssh_keygen_says_to_install_openssh(run, tmp_path, monkeypatch):
    folder, key, _ = run
    empty = tmp_path / "no-tools"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(attest.AttestationInputError, match="ssh-keygen is not installed: install OpenSSH"):
        sign(folder, key)
    assert not (folder / attest.ATTESTATION_NAME).exists()


def test_the_attestation_file_is_one_sorted_json_line(run):
    folder, key, _ = run
    text = sign(folder, key).read_text()
    assert text.count("\n") == 1 and text.endswith("}\n")
    assert text == json.dumps(json.loads(text), sort_keys=True) + "\n"
    assert list(json.loads(text)) == ["payload", "payloadType", "signatures"]


def test_attest_writes_to_out_when_given(run, tmp_path):
    folder, key, allowed = run
    out = tmp_path / "elsewhere.intoto.jsonl"
    assert sign(folder, key, out=out) == out and out.is_file()
    assert attest.attestation_beside(folder / "result.json") is None
    assert attest.verify(out, allowed, result_path=folder / "result.json").principal == "envbuild-ci"
    assert sign(folder, key) == attest.attestation_beside(folder / "result.json")


def test_the_statement_names_the_run_the_hardware_and_a_sif(run, tmp_path):
    folder, key, allowed = run
    result = json.loads((folder / "result.json").read_text())
    sif = tmp_path / "cpu.sif"
    sif.write_bytes(b"SIF image bytes")
    statement = attest.make_statement(
        folder / "result.json",
        commands=COMMANDS,
        envbuild_version="0.1.0",
        sif_path=sif,
        signed_at="2026-12-03T00:00:00Z",
    )
    assert attest.subject_digests(statement) == {
        "result.json": file_sha256(folder / "result.json"),
        "image": result["image"]["digest"].removeprefix("sha256:"),
        "sif": file_sha256(sif),
    }
    hardware, host = result["hardware"], result["host"]
    predicate = statement["predicate"]
    assert predicate == {
        "envbuild_version": "0.1.0",
        "commands": COMMANDS,
        "run_id": result["run_id"],
        "status": result["status"],
        "measured_at": result["finished_at"],
        "signed_at": "2026-12-03T00:00:00Z",
        "hardware": {
            "gpu_model": hardware["gpu_name"],
            "gpu_count": hardware["gpu_count"],
            "arch": hardware["arch"],
            "vendor": hardware["vendor"],
            "driver": host["amdgpu_version"],
            "kernel": host["kernel"],
            "os": host["os"],
        },
    }
    assert attest.verify(_signed(folder, key, statement), allowed).statement == statement
    with pytest.raises(attest.AttestationInputError, match="no-such.sif"):
        attest.make_statement(
            folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0", sif_path=tmp_path / "no-such.sif"
        )


@pytest.mark.parametrize("edit", [{"hardware": None, "host": "box"}, {"hardware": [1], "host": None}])
def test_a_result_without_hardware_or_host_objects_has_a_summary_of_nulls(run, edit):
    folder, _, _ = run
    result = {**json.loads((folder / "result.json").read_text()), **edit}
    (folder / "result.json").write_text(json.dumps(result))
    statement = attest.make_statement(folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0")
    assert set(statement["predicate"]["hardware"].values()) == {None}


@pytest.mark.parametrize(
    "image",
    [
        None,
        "box",
        {"digest": None},
        {"digest": 12},
        {"digest": "sha256:" + "ab" * 31},
        {"digest": "sha512:" + "ab" * 32},
        {"digest": "sha256:" + "AB" * 32},
        {"digest": "sha256:" + "ab" * 32 + "0"},
        {"digest": "ab" * 32},
    ],
)
def test_a_result_without_a_well_formed_image_digest_has_no_image_subject(run, image):
    folder, _, _ = run
    result = {**json.loads((folder / "result.json").read_text()), "image": image}
    (folder / "result.json").write_text(json.dumps(result))
    statement = attest.make_statement(folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0")
    assert [s["name"] for s in statement["subject"]] == ["result.json"]


@pytest.mark.parametrize("content", [b"[1, 2]", b"{not json", b'{"a": 1, "a": 2}', None])
def test_a_result_that_is_not_a_json_object_cannot_be_signed(run, content):
    folder, _, _ = run
    if content is None:
        (folder / "result.json").unlink()
    else:
        (folder / "result.json").write_bytes(content)
    with pytest.raises(attest.AttestationInputError, match="result.json: "):
        attest.make_statement(folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0")


@pytest.mark.parametrize("finished", [None, 12, "yesterday", "2026-13-40T00:00:00Z"])
def test_a_result_without_a_usable_finish_time_is_not_held_against_signed_at(run, finished):
    folder, key, allowed = run
    result = {**json.loads((folder / "result.json").read_text()), "finished_at": finished}
    (folder / "result.json").write_text(json.dumps(result))
    assert attest.verify(sign(folder, key), allowed).principal == "envbuild-ci"


@pytest.mark.parametrize(("signed", "verifies"), [("2026-12-02T21:52:02Z", True), ("2026-12-02T21:52:01Z", False)])
def test_signed_at_may_precede_the_finish_by_the_clock_allowance_and_no_more(run, signed, verifies):
    """The run finished at 21:57:02; CLOCK_SKEW_S (300 s) earlier is the earliest signed_at that verifies."""
    folder, key, allowed = run
    assert json.loads((folder / "result.json").read_text())["finished_at"] == "2026-12-02T21:57:02Z"
    statement = attest.make_statement(
        folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0", signed_at=signed
    )
    path = _signed(folder, key, statement)
    if verifies:
        assert attest.verify(path, allowed).statement["predicate"]["signed_at"] == signed
    else:
        with pytest.raises(attest.InvalidStatement, match=f"signed_at {signed} lies before the run finished"):
            attest.verify(path, allowed)


@pytest.mark.parametrize(("ahead", "verifies"), [(-86400, True), (200, True), (600, False)])
def test_signed_at_may_lie_ahead_of_this_clock_by_the_allowance_only(run, ahead, verifies):
    from datetime import datetime, timedelta, timezone

    folder, key, allowed = run
    signed = (datetime.now(timezone.utc) + timedelta(seconds=ahead)).strftime("%Y-%m-%dT%H:%M:%SZ")
    statement = attest.make_statement(
        folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0", signed_at=signed
    )
    statement["predicate"]["signed_at"] = signed
    path = _signed(folder, key, statement)
    if verifies:
        assert attest.verify(path, allowed).principal == "envbuild-ci"
    else:
        with pytest.raises(attest.InvalidStatement, match="lies in the future"):
            attest.verify(path, allowed)


@pytest.mark.parametrize("signed", [None, 20261203, "2026-12-03 00:00:00"])
def test_a_statement_without_a_signed_at_time_is_refused(run, signed):
    folder, key, allowed = run
    statement = attest.make_statement(folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0")
    statement["predicate"]["signed_at"] = signed
    with pytest.raises(attest.InvalidStatement, match=re.escape("no signed_at time (YYYY-MM-DDTHH:MM:SSZ)")):
        attest.verify(_signed(folder, key, statement), allowed)


@pytest.mark.parametrize(
    ("key", "value"),
    [("run_id", "0" * 32), ("run_id", "f" * 32), ("run_id", None), ("status", "skip"), ("status", "fail")],
)
def test_a_statement_naming_another_run_or_status_is_refused(run, key, value):
    """Values sorting before and after the result's alike."""
    folder, signing_key, allowed = run
    statement = attest.make_statement(folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0")
    statement["predicate"][key] = value
    with pytest.raises(
        attest.InvalidStatement, match=re.escape(f"the statement's {key} {value!r} is not the result's")
    ):
        attest.verify(_signed(folder, signing_key, statement), allowed)


def test_a_signed_result_that_is_not_an_object_is_bad_input(run):
    folder, key, allowed = run
    statement = attest.make_statement(folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0")
    (folder / "result.json").write_bytes(b"[]")
    statement["subject"] = [{"name": "result.json", "digest": {"sha256": file_sha256(folder / "result.json")}}]
    with pytest.raises(attest.AttestationInputError, match=re.escape("result.json: not a result (a JSON object)")):
        attest.verify(_signed(folder, key, statement), allowed)


def test_verify_checks_the_bytes_the_caller_read(run):
    """`result_bytes` are what is verified, whatever the file says now."""
    folder, key, allowed = run
    path = sign(folder, key)
    signed = (folder / "result.json").read_bytes()
    (folder / "result.json").write_text("{}")
    assert attest.verify(path, allowed, result_bytes=signed).principal == "envbuild-ci"
    with pytest.raises(attest.ResultTampered):
        attest.verify(path, allowed)
    (folder / "result.json").write_bytes(signed)
    with pytest.raises(attest.ResultTampered):
        attest.verify(path, allowed, result_bytes=signed + b"\n")


def test_a_missing_revocation_list_is_bad_input(run, tmp_path):
    folder, key, allowed = run
    with pytest.raises(attest.AttestationInputError, match="nowhere: no revocation list"):
        attest.verify(sign(folder, key), allowed, tmp_path / "nowhere")


@pytest.mark.parametrize("prefix", [b"\xef\xbb\xbf", b"\xff"])
def test_an_attestation_with_a_bom_or_not_utf8_is_bad_input(run, prefix):
    folder, key, allowed = run
    path = sign(folder, key)
    path.write_bytes(prefix + path.read_bytes())
    with pytest.raises(attest.AttestationInputError, match=attest.ATTESTATION_NAME):
        attest.verify(path, allowed)


def test_an_attestation_over_a_mebibyte_is_refused_and_one_just_under_verifies(run):
    folder, key, allowed = run
    path = sign(folder, key)
    envelope = path.read_text().rstrip("\n")
    path.write_text(envelope + " " * ((1 << 20) - len(envelope) - 1) + "\n")
    assert path.stat().st_size == 1 << 20 and attest.verify(path, allowed).principal == "envbuild-ci"
    path.write_text(envelope + " " * ((1 << 20) - len(envelope)) + "\n")
    with pytest.raises(attest.AttestationInputError, match="larger than 1048576 bytes"):
        attest.verify(path, allowed)


@pytest.mark.parametrize(
    "content",
    [
        '[{"payload": "eA==", "payloadType": "a", "signatures": []}]\n',
        '{"payload": "eA==", "payloadType": "a", "signatures": {}}\n',
        '{"payload": "eA==", "payloadType": "a", "signatures": "sig"}\n',
        '{"payload": "eA==", "payloadType": "a"}\n',
    ],
)
def test_an_envelope_of_the_wrong_shape_is_bad_input(run, content):
    folder, _, allowed = run
    path = folder / attest.ATTESTATION_NAME
    path.write_text(content)
    with pytest.raises(attest.AttestationInputError, match="not a DSSE envelope"):
        attest.verify(path, allowed)


def test_two_envelopes_in_one_file_are_bad_input(run):
    folder, key, allowed = run
    path = sign(folder, key)
    path.write_text(path.read_text() * 2)
    with pytest.raises(
        attest.AttestationInputError, match=r"expected one DSSE envelope \(one JSON line\), found 2 lines"
    ):
        attest.verify(path, allowed)


@pytest.mark.parametrize("count", [0, 2])
def test_an_envelope_without_exactly_one_signature_is_bad_input(run, tmp_path, count):
    folder, key, allowed = run
    envelope = envelope_of(sign(folder, key))
    envelope["signatures"] = (
        []
        if count == 0
        else (envelope["signatures"] + envelope_of(sign(folder, make_key(tmp_path / "keys", "second")))["signatures"])
    )
    path = folder / attest.ATTESTATION_NAME
    attest.write_attestation(envelope, path)
    with pytest.raises(attest.AttestationInputError, match=f"expected exactly one signature, found {count}"):
        attest.verify(path, allowed)


def test_a_signed_payload_that_is_not_strict_json_is_an_invalid_statement(run):
    """Duplicate keys in the signed payload: refused as strict_json reads it, after the signature checked out."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import Signature

    folder, key, allowed = run
    payload = b'{"_type": "x", "_type": "https://in-toto.io/Statement/v1"}'
    envelope = Envelope(payload=payload, payload_type=attest.PAYLOAD_TYPE, signatures={})
    proc = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-n", "envbuild", "-f", str(key)],
        input=envelope.pae(),
        capture_output=True,
        check=True,
    )
    blob = attest._dearmor(proc.stdout.decode())
    envelope.signatures["k"] = Signature(keyid="k", sig=blob.hex())
    path = folder / attest.ATTESTATION_NAME
    attest.write_attestation(envelope.to_dict(), path)
    with pytest.raises(attest.InvalidStatement, match="the signed payload is not JSON as this project reads it"):
        attest.verify(path, allowed)


def test_a_stored_attestation_is_checked_again_against_its_run(run, tmp_path):
    folder, key, allowed = run
    path = sign(folder, key)
    run_id = json.loads((folder / "result.json").read_text())["run_id"]
    text = path.read_text()
    again = attest.reverify_stored(text, run_id, allowed)
    assert isinstance(again, attest.Verified) and again.principal == "envbuild-ci" and again.envelope == text
    for other_run in ("0" * 32, "z" * 32):  # another run's id sorting before this one's, and after
        other = attest.reverify_stored(text, other_run, allowed)
        assert isinstance(other, attest.InvalidStatement) and f"names run {run_id!r}" in str(other)
    for broken in (None, "", "{not json"):
        assert isinstance(attest.reverify_stored(broken, run_id, allowed), attest.InvalidStatement)
    revoked = tmp_path / "revoked"
    revoked.write_text(public_line(key) + "\n")
    assert isinstance(attest.reverify_stored(text, run_id, allowed, revoked), attest.RevokedKey)
    with pytest.raises(attest.AttestationInputError, match="no revocation list"):
        attest.reverify_stored(text, run_id, allowed, tmp_path / "other")


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda e: e["signatures"][0].pop("keyid"), r"'signatures\[0\]\.keyid' is missing .*SHA256 fingerprint"),
        (lambda e: e["signatures"][0].update(sig=7), r"'signatures\[0\]\.sig' is missing or not a string"),
        (lambda e: e.update(payload=e["payload"][:-1]), r"'payload' is not standard base64 \(Incorrect padding\)"),
        (lambda e: e.update(payload="!!!!"), r"'payload' is not standard base64"),
        # b64decode raises ValueError, not binascii.Error, for text that is not ASCII
        (lambda e: e.update(payload="é" + e["payload"]), r"'payload' is not standard base64 \(string argument"),
        (lambda e: e.pop("payloadType"), r"'payloadType' is missing"),
    ],
)
def test_a_damaged_envelope_names_the_field_and_the_fix(run, damage, words):
    folder, key, allowed = run
    path = sign(folder, key)
    envelope = envelope_of(path)
    damage(envelope)
    attest.write_attestation(envelope, path)
    with pytest.raises(attest.AttestationInputError, match=words) as raised:
        attest.verify(path, allowed)
    assert str(path) in str(raised.value) and "sign the result again (`envbuild matrix sign`)" in str(raised.value)


def test_a_symlinked_result_is_bad_input(run, tmp_path):
    folder, key, allowed = run
    path = sign(folder, key)
    real = tmp_path / "real.json"
    (folder / "result.json").rename(real)
    (folder / "result.json").symlink_to(real)
    with pytest.raises(attest.AttestationInputError, match="a symbolic link"):
        attest.verify(path, allowed)


def test_a_key_listed_on_two_lines_verifies_inside_either_window(run):
    """A rotation keeps a key's old line beside a new one: any of its lines valid at signed_at will do; outside all
    of them, the message names the first."""
    folder, key, allowed = run
    path = sign(folder, key)
    expired, current = 'valid-before="20200101"', 'valid-after="20200101"'
    for first, second in ((expired, current), (current, expired)):
        allowed.write_text(
            f'envbuild-ci namespaces="envbuild",{first} {public_line(key)}\n'
            f'envbuild-ci namespaces="envbuild",{second} {public_line(key)}\n'
        )
        assert attest.verify(path, allowed).principal == "envbuild-ci"
    allowed.write_text(
        f'envbuild-ci namespaces="envbuild",{expired} {public_line(key)}\n'
        f'envbuild-ci namespaces="envbuild",valid-after="29990101" {public_line(key)}\n'
    )
    with pytest.raises(attest.KeyOutsideValidity, match=re.escape("(valid-after/valid-before of line 1)")):
        attest.verify(path, allowed)


@pytest.mark.parametrize(
    "killed, error, message",
    [
        ("-Y sign", attest.AttestationInputError, "ssh-keygen could not sign with"),
        ("-Y verify", attest.BadSignature, "does not match the envelope: ssh-keygen -Y verify failed"),
        ("-r", attest.RevokedKey, "is revoked"),  # the revocation check
    ],
)
def test_an_ssh_keygen_killed_by_a_signal_is_a_failed_step(run, tmp_path, monkeypatch, killed, error, message):
    """A step that ends by a signal (a negative return code) failed: no signature, no match, not cleared."""
    folder, key, allowed = run
    path = sign(folder, key) if killed != "-Y sign" else None
    real = shutil.which("ssh-keygen")
    stand_in = tmp_path / "bin" / "ssh-keygen"
    stand_in.parent.mkdir()
    test = {
        "-Y sign": '[ "$1 $2" = "-Y sign" ]',
        "-Y verify": '[ "$1 $2" = "-Y verify" ]',
        "-r": 'case " $* " in *" -r "*) true ;; *) false ;; esac',
    }[killed]
    stand_in.write_text(f'#!/bin/sh\n{test} && kill -KILL $$\nexec {real} "$@"\n')
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{stand_in.parent}:{os.environ['PATH']}")
    revoked = tmp_path / "revoked"
    revoked.write_text("")
    with pytest.raises(error, match=message):
        attest.verify(path, allowed, revoked=revoked) if path else sign(folder, key)


def test_an_ecdsa_key_signs_and_verifies(run, tmp_path):
    """Another key type puts the namespace of the SSH signature at another offset (an ed25519 key's is fixed)."""
    folder, _, _ = run
    key = tmp_path / "keys" / "ecdsa"
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-C", "ecdsa", "-f", str(key)], check=True)
    allowed = tmp_path / "allowed_ecdsa"
    allowed.write_text(f'alice namespaces="envbuild" {public_line(key)}\n')
    verified = attest.verify(sign(folder, key), allowed)
    assert verified.principal == "alice" and verified.fingerprint == key_fingerprint(key)
