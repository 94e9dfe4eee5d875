"""Forged provenance: identity comes from our own allowed_signers parse,
never from what a signature or certificate says. Real ssh-keygen keys, CA and certificates made in tmp_path,
real `matrix verify` and `matrix import` through the CLI, a real SQLite file."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.attest import signing as attest
from builder.store.provenance import CI_PRINCIPAL, GPU_PRINCIPAL, H200_PRINCIPAL, PROJECT_SIGNERS
from builder.store.store import MatrixStore
from repo import REPO_ROOT

CPU_RUN = REPO_ROOT / "results" / "cpu-torch2.13-py3.11" / "container-smoke"
COMMANDS = ["envbuild run workload --image envbuild/cpu:x --out run"]


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": "240"})


def make_key(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)], check=True)
    return path


def public(key: Path) -> str:
    return " ".join(Path(f"{key}.pub").read_text().split()[:2])


def run_folder(tmp_path: Path, name: str = "run") -> Path:
    folder = tmp_path / "results" / name
    folder.mkdir(parents=True)
    shutil.copyfile(CPU_RUN / "result.json", folder / "result.json")
    return folder


def sign(folder: Path, key: Path, **kwargs) -> Path:
    statement = attest.make_statement(folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0", **kwargs)
    path = folder / attest.ATTESTATION_NAME
    attest.write_attestation(attest.sign_statement(statement, key), path)
    return path


def verify_and_import(tmp_path: Path, folder: Path, allowed: Path):
    db = tmp_path / "m.db"
    return (
        invoke("matrix", "verify", folder, "--allowed-signers", allowed),
        invoke("matrix", "import", "--db", db, folder, "--allowed-signers", allowed),
        db,
    )


def test_a_certificate_from_a_contributor_ca_never_verifies_as_the_project_ci(tmp_path):
    """The reproduction: `* cert-authority` line, a certificate for envbuild-ci,envbuild-h200."""
    keys = tmp_path / "keys"
    keys.mkdir()
    ca, user = make_key(keys / "ca"), make_key(keys / "user")
    subprocess.run(
        ["ssh-keygen", "-q", "-s", str(ca), "-I", "forged", "-n", f"{CI_PRINCIPAL},{H200_PRINCIPAL}", f"{user}.pub"],
        check=True,
    )
    folder = run_folder(tmp_path)
    sign(folder, keys / "user-cert.pub")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'* cert-authority,namespaces="envbuild",valid-after="20261201" {public(ca)}\n')
    verified, imported, db = verify_and_import(tmp_path, folder, allowed)
    assert verified.exit_code == 2 and "line 1: cert-authority lines are not accepted" in verified.output
    assert imported.exit_code == 2 and "line 1: cert-authority" in imported.output and not db.exists()
    # the same CA listed for a plain principal (no pattern, no option) still does not make its certificates count
    allowed.write_text(f'mallory namespaces="envbuild" {public(ca)}\n')
    verified, imported, db = verify_and_import(tmp_path, folder, allowed)
    assert (
        verified.exit_code == 1 and "[signer]" in verified.output and "measured by this project" not in verified.output
    )
    assert imported.exit_code == 1 and not db.exists()


@pytest.mark.parametrize(
    "principal", ['" envbuild-ci,*"', "envbuild-ci,*", "*", "envbuild-?i", "!alice,*", '"envbuild-ci"', ",alice"]
)
def test_a_pattern_or_list_principal_is_refused_naming_the_line(tmp_path, principal):
    key = make_key(tmp_path / "k")
    folder = run_folder(tmp_path)
    sign(folder, key)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(
        f'# comment\nalice namespaces="envbuild" {public(make_key(tmp_path / "a"))}\n'
        f'{principal} namespaces="envbuild" {public(key)}\n'
    )
    verified, imported, db = verify_and_import(tmp_path, folder, allowed)
    assert verified.exit_code == 2, verified.output
    assert "line 3: principal" in verified.output and "not one plain name" in verified.output
    assert "Traceback" not in verified.output and imported.exit_code == 2 and not db.exists()


@pytest.mark.parametrize("reserved", [CI_PRINCIPAL, H200_PRINCIPAL, "ENVBUILD-CI", "Envbuild-H200"])
def test_a_contributor_line_can_never_take_a_reserved_principal(tmp_path, reserved):
    key = make_key(tmp_path / "k")
    folder = run_folder(tmp_path)
    sign(folder, key)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'{reserved} namespaces="envbuild",valid-after="20261201" {public(key)}\n')
    verified, imported, db = verify_and_import(tmp_path, folder, allowed)
    assert verified.exit_code == 2
    assert f"line 1: principal {reserved} is reserved for this project's own keys" in verified.output
    assert imported.exit_code == 2 and not db.exists()


def test_the_reserved_principals_are_bound_to_the_committed_keys():
    """PROJECT_SIGNERS names exactly the fingerprints of the project principals' lines committed in
    results/allowed_signers (a rotation changes both in one commit)."""
    from builder.attest import allowed_signers

    committed: dict[str, set[str]] = {}
    for s in allowed_signers.load(attest.ALLOWED_SIGNERS):  # a rotated key keeps its old line beside the new one
        committed.setdefault(s.principal, set()).add(s.fingerprint)
    assert {p: frozenset(committed[p]) for p in PROJECT_SIGNERS} == PROJECT_SIGNERS


def test_a_retired_project_key_signs_nothing_new_and_what_it_signed_keeps_verifying():
    """A project key whose private half is gone is retired: its committed line's window ends (valid-before), so a
    signature made with it from that day on is refused, while every committed run it signed before still verifies.
    Each project principal that still signs has exactly one open line: the key it signs with now."""
    import base64

    from builder.attest import allowed_signers

    lines = [s for s in allowed_signers.load(attest.ALLOWED_SIGNERS) if s.principal in PROJECT_SIGNERS]
    retired = {s.fingerprint: s for s in lines if s.valid_before is not None}
    assert {s.principal for s in retired.values()} == {H200_PRINCIPAL, GPU_PRINCIPAL}
    by_retired_keys = 0
    for envelope in sorted(REPO_ROOT.glob("results/*/*/result.json.intoto.jsonl")):
        verified = invoke("matrix", "verify", envelope.parent)
        assert verified.exit_code == 0, verified.output
        document = json.loads(envelope.read_text())
        line = retired.get(document["signatures"][0]["keyid"])
        if line is not None:
            by_retired_keys += 1
            assert line.principal in verified.output
            statement = json.loads(base64.b64decode(document["payload"]))
            assert statement["predicate"]["signed_at"] < line.valid_before.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert by_retired_keys >= 2, "the committed runs signed by retired keys were not found"
    still_open = {p: sum(s.valid_before is None for s in lines if s.principal == p) for p in PROJECT_SIGNERS}
    assert still_open == {CI_PRINCIPAL: 1, GPU_PRINCIPAL: 1, H200_PRINCIPAL: 0}


@pytest.mark.parametrize(
    "options",
    [
        'namespaces="envbuild",no-touch-required',
        'namespaces="envbuild",verify-required',
        'namespaces="git"',
        "",
        'namespaces="envbuild",namespaces="envbuild"',
        'namespaces="envbuild",valid-after="2026"',
        'namespaces="envbuild",',
    ],
)
def test_unknown_or_missing_options_are_refused(tmp_path, options):
    key = make_key(tmp_path / "k")
    folder = run_folder(tmp_path)
    sign(folder, key)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"alice {options} {public(key)}\n".replace("  ", " "))
    verified = invoke("matrix", "verify", folder, "--allowed-signers", allowed)
    assert verified.exit_code == 2 and "line 1" in verified.output, verified.output


def test_one_key_bound_to_two_principals_is_refused(tmp_path):
    key = make_key(tmp_path / "k")
    folder = run_folder(tmp_path)
    sign(folder, key)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'alice namespaces="envbuild" {public(key)}\nbob namespaces="envbuild" {public(key)}\n')
    verified = invoke("matrix", "verify", folder, "--allowed-signers", allowed)
    assert verified.exit_code == 2 and "line 2: key" in verified.output and "already bound to alice" in verified.output


def test_the_principal_comes_from_our_line_not_from_the_signature(tmp_path):
    key = make_key(tmp_path / "k")
    folder = run_folder(tmp_path)
    path = sign(folder, key)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'  alice@example.org\tnamespaces="envbuild"\t{public(key)}  a comment\n')
    verified = attest.verify(path, allowed)
    assert verified.principal == "alice@example.org"
    assert invoke("matrix", "verify", folder, "--allowed-signers", allowed).exit_code == 0


def _allowed(tmp_path: Path, key: Path, options: str = "") -> Path:
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'alice namespaces="envbuild"{options} {public(key)}\n')
    return allowed


def test_a_backdated_signed_at_does_not_revive_an_expired_key(tmp_path):
    """The key ended on 2026-06-01; signing now with signed_at 2026-01-01 precedes the run (2026-12-02)."""
    key = make_key(tmp_path / "k")
    folder = run_folder(tmp_path)
    sign(folder, key, signed_at="2026-01-01T00:00:00Z")
    verified = invoke(
        "matrix", "verify", folder, "--allowed-signers", _allowed(tmp_path, key, ',valid-before="20260601"')
    )
    assert verified.exit_code == 1 and "[statement]" in verified.output and "before the run finished" in verified.output


@pytest.mark.parametrize(
    "stamp, words",
    [
        ("2999-01-01T00:00:00Z", "lies in the future"),
        ("2026-13-01T00:00:00Z", "not a valid time"),
        ("yesterday", "no signed_at time"),
    ],
)
def test_signed_at_in_the_future_or_malformed_is_refused(tmp_path, stamp, words):
    key = make_key(tmp_path / "k")
    folder = run_folder(tmp_path)
    sign(folder, key, signed_at=stamp)
    verified = invoke("matrix", "verify", folder, "--allowed-signers", _allowed(tmp_path, key))
    assert verified.exit_code == 1 and "[statement]" in verified.output and words in verified.output


def test_signed_at_a_little_before_the_run_finished_is_within_the_clock_allowance(tmp_path):
    key = make_key(tmp_path / "k")
    folder = run_folder(tmp_path)
    sign(folder, key, signed_at="2026-12-02T21:55:02Z")  # finished_at 21:57:02: two minutes of clock skew
    assert invoke("matrix", "verify", folder, "--allowed-signers", _allowed(tmp_path, key)).exit_code == 0


@pytest.mark.parametrize("edit", ["duplicate", "bom"])
def test_duplicate_keys_and_a_bom_are_refused_alike_by_verify_and_import(tmp_path, edit):
    key = make_key(tmp_path / "k")
    folder = run_folder(tmp_path)
    raw = (folder / "result.json").read_bytes()
    raw = (
        raw.replace(b'"status": "pass"', b'"status": "fail", "status": "pass"', 1)
        if edit == "duplicate"
        else b"\xef\xbb\xbf" + raw
    )
    (folder / "result.json").write_bytes(raw)
    statement = attest.make_statement(CPU_RUN / "result.json", commands=COMMANDS, envbuild_version="0.1.0")
    statement["subject"][0]["digest"]["sha256"] = hashlib.sha256(raw).hexdigest()
    attest.write_attestation(attest.sign_statement(statement, key), folder / attest.ATTESTATION_NAME)
    verified, imported, db = verify_and_import(tmp_path, folder, _allowed(tmp_path, key))
    words = "duplicate key 'status'" if edit == "duplicate" else "byte-order mark"
    assert verified.exit_code == 2 and words in verified.output, verified.output
    assert imported.exit_code == 2 and words in imported.output and not db.exists()


@pytest.mark.parametrize(
    "change", [{"payload": 12}, {"sig": 5}, {"payloadType": None}, {"signatures": [5]}, {"sig": "zz"}, {"keyid": 7}]
)
def test_malformed_envelopes_are_bad_input_not_tracebacks(tmp_path, change):
    key = make_key(tmp_path / "k")
    folder = run_folder(tmp_path)
    path = sign(folder, key)
    envelope = json.loads(path.read_text())
    for name, value in change.items():
        if name in ("sig", "keyid"):
            envelope["signatures"][0][name] = value
        else:
            envelope[name] = value
    path.write_text(json.dumps(envelope) + "\n")
    verified = invoke("matrix", "verify", folder, "--allowed-signers", _allowed(tmp_path, key))
    assert verified.exit_code in (1, 2) and verified.exception is None or isinstance(verified.exception, SystemExit)
    assert "Traceback" not in verified.output and ("ERROR" in verified.output or "FAILED" in verified.output)
    assert verified.exit_code == 2, verified.output


def test_one_bad_attestation_in_an_artifact_import_is_reported_and_the_rest_import(tmp_path):
    key = make_key(tmp_path / "k")
    good, bad = run_folder(tmp_path, "good"), run_folder(tmp_path, "bad")
    result = json.loads((bad / "result.json").read_text())
    result["run_id"] = "0" * 32
    (bad / "result.json").write_text(json.dumps(result))
    sign(good, key)
    sign(bad, key)
    envelope = json.loads((bad / attest.ATTESTATION_NAME).read_text())
    envelope["payload"] = 12
    (bad / attest.ATTESTATION_NAME).write_text(json.dumps(envelope) + "\n")
    db = tmp_path / "m.db"
    imported = invoke(
        "matrix",
        "import",
        "--db",
        db,
        tmp_path / "results",
        "--skip-invalid",
        "--allowed-signers",
        _allowed(tmp_path, key),
    )
    assert imported.exit_code == 0, imported.output
    assert (
        "skipped" in imported.output
        and "bad/result.json" in imported.output
        and "imported 1 new run" in imported.output
    )
    with MatrixStore.open(db, readonly=True) as store:
        assert [r["provenance"] for r in store.runs()] == ["contributed"]


def test_the_committed_results_still_verify():
    verified = invoke("matrix", "verify")
    assert verified.exit_code == 0, verified.output
    assert "measured by this project's CI" in verified.output and "signed by envbuild-h200" in verified.output
    assert "signed by envbuild-gpu" in verified.output


def test_an_unsigned_payload_forging_run_id_or_status_is_refused(tmp_path):
    """The statement must name the result it signs: run_id and status match the result's."""
    key = make_key(tmp_path / "k")
    folder = run_folder(tmp_path)
    statement = attest.make_statement(folder / "result.json", commands=COMMANDS, envbuild_version="0.1.0")
    statement["predicate"]["status"] = "fail"
    attest.write_attestation(attest.sign_statement(statement, key), folder / attest.ATTESTATION_NAME)
    verified = invoke("matrix", "verify", folder, "--allowed-signers", _allowed(tmp_path, key))
    assert verified.exit_code == 1 and "statement's status 'fail' is not the result's 'pass'" in verified.output
