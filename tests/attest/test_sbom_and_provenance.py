"""The SBOM document and the provenance statement, without an engine: equal inputs give equal SBOM bytes in any
order, a changed package or pin changes them, hostile SBOMs are refused when read back, and a provenance statement
signed here verifies while an edited one does not."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings, strategies as st

from builder import build_inputs, sbom
from builder.attest import build_provenance, signing
from tests.build_record_fixtures import make_key, rendered, signer_line

PACKAGES = (
    sbom.Package(sbom.DPKG, "libc6", "2.36-9+deb12u13", "amd64"),
    sbom.Package(sbom.DPKG, "python3.11", "3.11.2-6+deb12u8", "amd64"),
    sbom.Package(sbom.PYTHON, "torch", "2.13.0+cpu"),
    sbom.Package(sbom.PYTHON, "numpy", "2.4.6"),
)
BASE = "sha256:" + "5" * 64


def _document(packages=PACKAGES, manifest=None, base=BASE) -> bytes:
    manifest = manifest if manifest is not None else rendered(flavor="cpu", torch="2.13")
    return sbom.document("x:y", sbom.Contents("debian", "12", tuple(packages)), manifest, base, "0.1.0")


def test_equal_inputs_give_equal_bytes_in_any_order():
    shuffled = list(PACKAGES)
    random.Random(7).shuffle(shuffled)
    first, second = _document(), _document(tuple(shuffled))
    assert first == second
    data = json.loads(first)
    assert "timestamp" not in data["metadata"] and data["serialNumber"].startswith("urn:uuid:")
    torch = next(c for c in data["components"] if c["name"] == "torch")
    manifest = rendered(flavor="cpu", torch="2.13")
    assert {h["content"] for r in torch["externalReferences"] for h in r["hashes"]} == set(
        manifest["torch"]["wheel_hashes"].values()
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda: _document(PACKAGES[:-1] + (sbom.Package(sbom.PYTHON, "numpy", "2.4.7"),)),
        lambda: _document(PACKAGES[1:]),
        lambda: _document(base="sha256:" + "6" * 64),
        lambda: _document(manifest={**rendered(flavor="cpu", torch="2.13"), "lock": {"file": "x", "sha256": "7" * 64}}),
    ],
    ids=["a version", "a package less", "another base", "another lock"],
)
def test_a_changed_package_or_pin_changes_the_document_and_its_serial(change):
    before, after = json.loads(_document()), json.loads(change())
    assert before != after and before["serialNumber"] != after["serialNumber"]


def test_components_read_back_as_written():
    components = sbom.read_components(_document())
    assert components["dpkg libc6 (amd64)"] == "2.36-9+deb12u13"
    assert components["python torch"] == "2.13.0+cpu"
    assert components["pinned recipes/locks/torch2.13-py3.11.txt"].startswith("sha256:")


@pytest.mark.parametrize(
    "raw, says",
    [
        (b"[]", "not a CycloneDX document"),
        (b'{"bomFormat": "CycloneDX", "components": {}}', "'components' is not a list"),
        (b'{"bomFormat": "CycloneDX", "components": [{"name": 5}]}', "components[0].name"),
        (b'{"bomFormat": "CycloneDX", "bomFormat": "x"}', "duplicate key"),
        (b"x" * (sbom.MAX_SBOM_BYTES + 1), "larger than"),
    ],
)
def test_a_hostile_sbom_is_refused_with_what_is_wrong(raw, says):
    with pytest.raises(sbom.SbomError, match=says.replace("[", r"\[").replace("]", r"\]")):
        sbom.read_components(raw)


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=60))
def test_package_tokens_are_plain(text):
    if sbom.valid_token(text):
        assert text[0].isalnum() and all(c.isalnum() or c in "._+~:-" for c in text)


def _statement(manifest: dict, files: dict[str, str]) -> dict:
    facts = build_provenance.BuildFacts(
        "b" * 32, "envbuild/x:y", "sha256:" + "a" * 64, "2026-12-06T00:00:00Z", "2026-12-06T00:10:00Z",
        "DOCKER_BUILDKIT=1 docker build (/usr/bin/docker)", "docker-build", "20.10.24", "0.1.0", {"network": "host"},
    )  # fmt: skip
    return build_provenance.make_statement(facts, manifest, None, BASE, files, "c" * 64)


def test_the_statement_names_every_input_by_digest_and_a_changed_input_changes_it():
    manifest = rendered(flavor="cpu", torch="2.13")
    files = dict(manifest["files"])
    statement = _statement(manifest, files)
    deps = {d["name"]: d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert deps["context/Dockerfile"]["digest"] == {"sha256": manifest["files"]["Dockerfile"]}
    assert deps[manifest["base_image"]]["digest"] == {"sha256": "5" * 64}
    assert all(d.get("digest") for d in deps.values())
    changed = _statement(manifest, {**files, "requirements.lock": "0" * 64})
    after = {d["name"]: d for d in changed["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert [n for n in deps if deps[n] != after[n]] == ["context/requirements.lock"]


def test_source_inputs_name_the_commit_and_each_patch():
    manifest = rendered(flavor="rocm", accel_version="6.2", torch="2.4", arch="gfx90a")
    pinned = {i.role: i for i in build_inputs.pinned(manifest, None)}
    assert pinned["torch-source"].digest == {"gitCommit": manifest["torch"]["git"]["commit"]}
    assert pinned["patch"].digest == {"sha256": manifest["patches"][0]["sha256"]}
    assert pinned["base-image"].digest == {}  # pinned by tag only: said, not invented


def test_a_signed_statement_verifies_and_an_edited_one_does_not(tmp_path):
    key = make_key(tmp_path / "key", "k")
    allowed = tmp_path / "allowed"
    allowed.write_text(signer_line("k@example.org", key))
    raw = build_provenance.payload(_statement(rendered(flavor="cpu", torch="2.13"), {}))
    (tmp_path / "provenance.json").write_bytes(raw)
    envelope = build_provenance.sign_file(tmp_path / "provenance.json", key)
    verified, payload = build_provenance.verify(envelope, allowed, None)
    assert payload == raw and verified.principal == "k@example.org"
    data = json.loads(envelope.read_text())
    data["payload"] = data["payload"][:-8] + "AAAAAAA="
    envelope.write_text(json.dumps(data))
    with pytest.raises(signing.VerificationFailure):
        build_provenance.verify(envelope, allowed, None)
    (tmp_path / "provenance.json").write_bytes(json.dumps(json.loads(raw), indent=1).encode())
    with pytest.raises(signing.AttestationInputError, match="not in the form envbuild signs"):
        build_provenance.sign_file(tmp_path / "provenance.json", key)
