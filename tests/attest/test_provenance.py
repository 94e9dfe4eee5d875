"""Signed results through the CLI: publish --sign, matrix verify, import (which verifies first), provenance in the
store and the report, report --markdown --check on a results folder. Real ssh-keygen keys, a real SQLite file."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.attest import signing as attest
from builder.store.provenance import CI_PRINCIPAL, PROJECT_SIGNERS, Provenance
from builder.store.store import MatrixStore
from repo import REPO_ROOT

RESULTS = REPO_ROOT / "results"
CPU_RUN = RESULTS / "cpu-torch2.13-py3.11" / "container-smoke"
H200_RUN = RESULTS / "cuda13.0-torch2.11-sm_90-py3.12" / "local-smoke-tiny-gemma"
CPU_KEY = "cpu-torch2.13-py3.11"


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": "240"})


def make_key(path: Path, comment: str) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
    return path


def fingerprint(key: Path) -> str:
    return subprocess.run(
        ["ssh-keygen", "-lf", f"{key}.pub"], capture_output=True, text=True, check=True
    ).stdout.split()[1]


@pytest.fixture()
def keys(tmp_path, monkeypatch):
    """A contributor's key and a key standing in for this project's CI key (bound to CI_PRINCIPAL in
    PROJECT_SIGNERS for the test), both in an allowed_signers file."""
    folder = tmp_path / "keys"
    folder.mkdir()
    alice, ci = make_key(folder / "alice", "alice"), make_key(folder / "ci", "ci")
    monkeypatch.setitem(PROJECT_SIGNERS, CI_PRINCIPAL, PROJECT_SIGNERS[CI_PRINCIPAL] | {fingerprint(ci)})
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(
        "".join(
            f'{name} namespaces="envbuild" {" ".join(Path(f"{key}.pub").read_text().split()[:2])}\n'
            for name, key in (("alice@example.org", alice), (CI_PRINCIPAL, ci))
        )
    )
    return alice, ci, allowed


def local_run(tmp_path: Path, source: Path = CPU_RUN) -> Path:
    """A run folder as `envbuild run` leaves it: result.json (host name included) and container.log."""
    run = tmp_path / "run-smoke"
    run.mkdir()
    result = json.loads((source / "result.json").read_text())
    result["host"]["hostname"] = "alices-box"
    (run / "result.json").write_text(json.dumps(result))
    if (source / "container.log").is_file():
        shutil.copyfile(source / "container.log", run / "container.log")
    return run / "result.json"


def test_publish_sign_verify_import_and_the_provenance_in_the_report(tmp_path, keys):
    alice, _, allowed = keys
    results = tmp_path / "results"
    published = invoke(
        "matrix",
        "publish",
        local_run(tmp_path),
        "--name",
        "alice-smoke",
        "-o",
        results,
        "--sign",
        alice,
        "--command",
        "envbuild run workload --image envbuild/cpu:x --out run-smoke",
    )
    assert published.exit_code == 0, published.output
    folder = results / CPU_KEY / "alice-smoke"
    assert sorted(p.name for p in folder.iterdir()) == ["container.log", "result.json", "result.json.intoto.jsonl"]
    assert "alices-box" not in (folder / "result.json").read_text()

    verified = invoke("matrix", "verify", results, "--allowed-signers", allowed)
    assert verified.exit_code == 0, verified.output
    label = f"contributed, signed by alice@example.org ({fingerprint(alice)}), verified"
    assert label in verified.output

    # a second, unsigned run of another cell: shown locally, never in the published report
    unsigned = tmp_path / "unsigned" / "result.json"
    unsigned.parent.mkdir()
    shutil.copyfile(H200_RUN / "result.json", unsigned)
    db = tmp_path / "fresh.db"
    imported = invoke("matrix", "import", "--db", db, results, unsigned, "--allowed-signers", allowed)
    assert imported.exit_code == 0, imported.output
    with MatrixStore.open(db, readonly=True) as store:
        assert {r["cell_key"]: (r["provenance"], r["signer"]) for r in store.runs()} == {
            CPU_KEY: ("contributed", f"alice@example.org ({fingerprint(alice)})"),
            "cuda13.0-torch2.11-sm_90-py3.12": ("unsigned", None),
        }

    site = tmp_path / "site"
    assert invoke("report", "--db", db, "--no-recipes", "-o", site, "--allowed-signers", allowed).exit_code == 0
    page = (site / "cells" / f"{CPU_KEY}.html").read_text()
    row = re.search(r'<tr data-provenance="contributed">.*?</tr>', page, re.S).group(0)
    assert label.replace("'", "&#39;") in row and "CPU only" in row and "Debian GNU/Linux 12" in row
    link = re.search(r'href="\.\./(attestations/[0-9a-f]+\.intoto\.jsonl)"', row).group(1)
    assert (site / link).read_text() == (folder / "result.json.intoto.jsonl").read_text()
    index = (site / "index.html").read_text()
    assert (
        f'data-cell="{CPU_KEY}" data-status="pass" data-arch="none" data-release="cpu" data-provenance="contributed"'
        in index
    )
    assert '<option value="unsigned">unsigned</option>' in index
    assert "unsigned, imported locally" in index

    public = tmp_path / "public"
    assert (
        invoke(
            "report", "--db", db, "--no-recipes", "--published", "-o", public, "--allowed-signers", allowed
        ).exit_code
        == 0
    )
    index = (public / "index.html").read_text()
    assert "unsigned" not in index and label.replace("'", "&#39;") in index
    unsigned_id = json.loads(unsigned.read_text())["run_id"]
    assert unsigned_id in (site / "data" / "cuda13.0-torch2.11-sm_90-py3.12.json").read_text()
    assert "cuda13.0" not in (public / "data.json").read_text()
    assert not any(unsigned_id in p.read_text() for p in public.rglob("*") if p.is_file() and p.suffix != ".svg")


def test_import_verifies_first_and_imports_nothing_when_a_result_was_tampered(tmp_path, keys):
    alice, _, allowed = keys
    results = tmp_path / "results"
    assert (
        invoke(
            "matrix",
            "publish",
            local_run(tmp_path),
            "--name",
            "a",
            "-o",
            results,
            "--sign",
            alice,
            "--command",
            "envbuild run workload",
        ).exit_code
        == 0
    )
    good = tmp_path / "good"
    shutil.copytree(H200_RUN, good)  # signed by this project's H200 key, which `allowed` does not list
    result = results / CPU_KEY / "a" / "result.json"
    result.write_text(result.read_text().replace('"status": "pass"', '"status": "fail"', 1))
    db = tmp_path / "m.db"
    refused = invoke("matrix", "import", "--db", db, results, "--allowed-signers", allowed)
    assert refused.exit_code == 1
    assert "[result_digest]" in refused.output and "the result changed after it was signed" in refused.output
    assert not db.exists()
    unknown = invoke("matrix", "import", "--db", db, good, "--allowed-signers", allowed)
    assert unknown.exit_code == 1 and "[signer]" in unknown.output and not db.exists()
    (results / CPU_KEY / "a" / attest.ATTESTATION_NAME).write_text("{not json\n")
    unreadable = invoke("matrix", "import", "--db", db, results, "--allowed-signers", allowed)
    assert unreadable.exit_code == 2 and "not a DSSE envelope" in unreadable.output and not db.exists()


def test_verify_exit_codes_name_the_check(tmp_path, keys):
    alice, _, allowed = keys
    results = tmp_path / "results"
    assert (
        invoke(
            "matrix",
            "publish",
            local_run(tmp_path),
            "--name",
            "a",
            "-o",
            results,
            "--sign",
            alice,
            "--command",
            "envbuild run workload",
        ).exit_code
        == 0
    )
    folder = results / CPU_KEY / "a"
    assert invoke("matrix", "verify", folder / "result.json", "--allowed-signers", allowed).exit_code == 0
    revoked = tmp_path / "revoked"
    revoked.write_text(Path(f"{alice}.pub").read_text())
    out = invoke("matrix", "verify", results, "--allowed-signers", allowed, "--revoked", revoked)
    assert out.exit_code == 1 and "[revocation]" in out.output
    shutil.copytree(folder, results / CPU_KEY / "b")
    (results / CPU_KEY / "b" / attest.ATTESTATION_NAME).unlink()
    out = invoke("matrix", "verify", results, "--allowed-signers", allowed)
    assert out.exit_code == 1 and "FAILED" in out.output and "[unsigned]" in out.output
    assert invoke("matrix", "verify", tmp_path / "nowhere" / "result.json", "--allowed-signers", allowed).exit_code == 2
    assert invoke("matrix", "verify", results, "--allowed-signers", tmp_path / "none").exit_code == 2


def test_publish_refuses_to_sign_without_commands_or_with_a_bad_key_and_leaves_nothing(tmp_path, keys):
    results = tmp_path / "results"
    run = local_run(tmp_path)
    no_commands = invoke("matrix", "publish", run, "--name", "a", "-o", results, "--sign", keys[0])
    assert no_commands.exit_code == 2 and "--command" in no_commands.output
    bad_key = tmp_path / "not-a-key"
    bad_key.write_text("hello\n")
    refused = invoke("matrix", "publish", run, "--name", "a", "-o", results, "--sign", bad_key, "--command", "x")
    assert refused.exit_code == 2 and "could not sign" in refused.output
    assert not (results / CPU_KEY / "a").exists()


def test_report_check_fails_on_a_committed_result_without_a_verifying_attestation(tmp_path, keys):
    _, ci, allowed = keys
    results = tmp_path / "results"
    assert (
        invoke(
            "matrix",
            "publish",
            local_run(tmp_path),
            "--name",
            "ci-smoke",
            "-o",
            results,
            "--sign",
            ci,
            "--command",
            "envbuild run workload",
        ).exit_code
        == 0
    )
    db = tmp_path / "m.db"
    assert invoke("matrix", "import", "--db", db, results, "--allowed-signers", allowed).exit_code == 0
    summary = tmp_path / "compatibility.md"
    common = (
        "report",
        "--db",
        db,
        "--no-recipes",
        "--markdown",
        summary,
        "--results",
        results,
        "--allowed-signers",
        allowed,
    )
    assert invoke(*common[:-4], *common[-2:]).exit_code == 0
    assert "measured by this project's CI" in summary.read_text()
    ok = invoke(*common, "--check")
    assert ok.exit_code == 0, ok.output
    shutil.copytree(results / CPU_KEY / "ci-smoke", results / CPU_KEY / "copied")
    (results / CPU_KEY / "copied" / attest.ATTESTATION_NAME).unlink()
    stale = invoke(*common, "--check")
    assert stale.exit_code == 1 and "copied/result.json: [unsigned]" in stale.output


def test_a_signed_import_upgrades_an_unsigned_copy_and_merged_runs_come_in_unsigned(tmp_path, keys):
    result = json.loads((CPU_RUN / "result.json").read_text())
    signed = Provenance.signed("alice@example.org", "SHA256:x", '{"payload": "..."}')
    with MatrixStore.open(tmp_path / "job.db") as store:
        assert store.record_run(result).outcome == "new"
        assert store.record_run(result, provenance=signed).outcome == "identical"
        assert store.record_run(result).outcome == "identical"  # an unsigned copy never downgrades it
        (row,) = store.runs()
        assert (row["provenance"], row["signer"], row["attestation"]) == (
            "contributed",
            "alice@example.org (SHA256:x)",
            '{"payload": "..."}',
        )
    with MatrixStore.open(tmp_path / "merged.db") as store:
        store.merge_from(tmp_path / "job.db")
        (row,) = store.runs()
        assert (row["provenance"], row["signer"]) == ("unsigned", None)


@pytest.mark.slow
def test_index_filters_by_provenance_in_chromium(tmp_path, keys):
    """CI-signed, contributed and unsigned runs in three cells plus an untested one; the "measured by" filter in a
    real browser shows each kind alone."""
    from report_browser import inspect_page, require_chromium

    from builder.report.site import build_report
    from builder.store.summary import summarize
    from builder.plan.cells import Cell
    from matrix_fixtures import make_result

    require_chromium()
    cpu = json.loads((CPU_RUN / "result.json").read_text())
    h200 = json.loads((H200_RUN / "result.json").read_text())
    untested = Cell(flavor="rocm", accel_version="6.2", torch="2.5", arch="gfx90a", python="3.10")
    with MatrixStore.open(tmp_path / "m.db") as store:
        store.record_run(cpu, provenance=Provenance.signed(CI_PRINCIPAL, min(PROJECT_SIGNERS[CI_PRINCIPAL]), "{}"))
        store.record_run(h200, provenance=Provenance.signed("alice@example.org", "SHA256:al", "{}"))
        store.record_run(make_result(finished_at="2026-12-01T10:00:00Z"))
        index = build_report(
            store, summarize(store, [untested]), tmp_path / "site", generated_at="2026-12-03T00:00:00Z"
        )
    page = inspect_page(
        index.as_uri(),
        tmp_path / "provenance.png",
        """(() => {
      const f = document.getElementById('filters');
      const rows = () => Array.from(document.querySelectorAll('#cells tbody tr')).filter(r => !r.hidden).map(r => r.dataset.cell);
      const out = {options: Array.from(f.provenance.options).map(o => o.value)};
      for (const kind of ['ci', 'contributed', 'unsigned', 'none']) {
        f.provenance.value = kind; f.dispatchEvent(new Event('change')); out[kind] = rows();
      }
      return out;
    })()""",
    )
    assert page.errors == []
    v = page.value
    assert v["options"] == ["", "ci", "contributed", "unsigned", "none"]
    assert v["ci"] == [CPU_KEY] and v["contributed"] == ["cuda13.0-torch2.11-sm_90-py3.12"]
    assert v["unsigned"] == ["rocm6.2-torch2.4-gfx90a-py3.10"] and v["none"] == [untested.key]


def _signed_by_a_contributor(tmp_path, key: str, principal: str) -> list[dict]:
    """Publish a run signed with `key`, listed under `principal` alone: `matrix verify` and `matrix import` both
    call it contributed, never this project's CI; the stored runs."""
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'{principal} namespaces="envbuild" {" ".join(Path(f"{key}.pub").read_text().split()[:2])}\n')
    results = tmp_path / "results"
    assert (
        invoke(
            "matrix",
            "publish",
            local_run(tmp_path),
            "--name",
            "contributed",
            "-o",
            results,
            "--sign",
            key,
            "--command",
            "envbuild run workload",
        ).exit_code
        == 0
    )
    verified = invoke("matrix", "verify", results, "--allowed-signers", allowed)
    assert verified.exit_code == 0, verified.output
    assert f"contributed, signed by {principal} ({fingerprint(key)}), verified" in verified.output
    assert "this project's CI" not in verified.output
    db = tmp_path / "m.db"
    assert invoke("matrix", "import", "--db", db, results, "--allowed-signers", allowed).exit_code == 0
    with MatrixStore.open(db, readonly=True) as store:
        return store.runs()


def test_a_signer_whose_name_starts_like_the_ci_is_a_contributor(tmp_path):
    """`envbuild-ci-bob` is not this project's CI: only the exact CI principal is labelled as measured by it."""
    bob = make_key(tmp_path / "bob", "bob")
    runs = _signed_by_a_contributor(tmp_path, bob, f"{CI_PRINCIPAL}-bob")
    assert [(r["provenance"], r["signer"]) for r in runs] == [
        ("contributed", f"{CI_PRINCIPAL}-bob ({fingerprint(bob)})")
    ]


@pytest.mark.parametrize("principal", ["alice@example.org", "zoe@example.org"])
def test_the_ci_key_listed_under_another_principal_is_a_contributor(tmp_path, keys, principal):
    """ "Measured by this project's CI" takes both the CI principal and one of its bound keys: the CI key on a line
    of another name (sorting before or after `envbuild-ci`) is that contributor's key."""
    _, ci, _ = keys
    runs = _signed_by_a_contributor(tmp_path, ci, principal)
    assert [r["provenance"] for r in runs] == ["contributed"]


def test_a_ci_run_in_the_published_report_is_measured_by_this_projects_ci(tmp_path, keys):
    """The published report reads each run's kind back from its own copy of the database."""
    _, ci, allowed = keys
    results = tmp_path / "results"
    assert (
        invoke(
            "matrix",
            "publish",
            local_run(tmp_path),
            "--name",
            "ci-smoke",
            "-o",
            results,
            "--sign",
            ci,
            "--command",
            "envbuild run workload",
        ).exit_code
        == 0
    )
    db = tmp_path / "m.db"
    assert invoke("matrix", "import", "--db", db, results, "--allowed-signers", allowed).exit_code == 0
    public = tmp_path / "public"
    out = invoke("report", "--db", db, "--no-recipes", "--published", "-o", public, "--allowed-signers", allowed)
    assert out.exit_code == 0, out.output
    page = (public / "cells" / f"{CPU_KEY}.html").read_text()
    row = re.search(r'<tr data-provenance="ci">.*?</tr>', page, re.S).group(0)
    assert "measured by this project&#39;s CI" in row and "unsigned" not in row


def test_labels_of_runs_read_back_from_the_store(tmp_path):
    """What the report and the CLI show for each kind, from the kinds and signers as the store gives them back."""
    from builder.store import provenance
    from matrix_fixtures import make_result

    stored = {
        "ci": Provenance.signed(CI_PRINCIPAL, min(PROJECT_SIGNERS[CI_PRINCIPAL]), "{}"),
        "alice": Provenance.signed("alice@example.org", "SHA256:al", "{}"),
        "revoked": Provenance(provenance.REVOKED, "mallory (SHA256:ma)", "{}"),
        "revoked, signer lost": Provenance(provenance.REVOKED, None, "{}"),
        "unsigned": Provenance(),
    }
    names = {}
    with MatrixStore.open(tmp_path / "m.db") as store:
        for name, signed in stored.items():
            result = make_result()
            names[result["run_id"]] = name
            assert store.record_run(result, provenance=signed).outcome == "new"
        labels = {
            names[row["result"]["run_id"]]: provenance.label(row["provenance"], row["signer"]) for row in store.runs()
        }
    assert labels == {
        "ci": "measured by this project's CI",
        "alice": "contributed, signed by alice@example.org (SHA256:al), verified",
        "revoked": "revoked: signed by mallory (SHA256:ma), which no longer verifies",
        "revoked, signer lost": "revoked: signed by an unknown key, which no longer verifies",
        "unsigned": "unsigned, imported locally",
    }


@pytest.mark.parametrize("kind", ["bogus", "ci-bob", "CI", "pending", "revoked-later", ""])
def test_a_kind_this_code_does_not_know_is_labelled_unsigned(kind):
    """Never "measured by this project's CI", "verified" or "revoked" for a kind that is not one of KINDS."""
    from builder.store.provenance import label

    assert label(kind, "mallory (SHA256:ma)") == "unsigned, imported locally"


def _fresh(text: str) -> str:
    """`text` as a new string object, the way one read from SQLite or JSON is."""
    copy = text.encode().decode()
    assert copy == text and copy is not text
    return copy


@pytest.mark.parametrize(("kind", "signer"), [("ci", None), ("contributed", None), ("unsigned", "alice (SHA256:al)")])
def test_a_signed_provenance_names_its_signer_and_an_unsigned_one_none(kind, signer):
    with pytest.raises(ValueError, match="a signed provenance names its signer; an unsigned one names none"):
        Provenance(_fresh(kind), signer, "{}")


@pytest.mark.parametrize(
    ("kind", "signer"),
    [
        ("ci", "envbuild-ci (SHA256:c)"),
        ("contributed", "alice (SHA256:al)"),
        ("unsigned", None),
        ("revoked", "alice (SHA256:al)"),
        ("revoked", None),
    ],
)
def test_provenances_that_hold_together_are_made_and_stay_as_checked(kind, signer):
    """A revoked run may have lost its signer; a provenance cannot be changed after its checks ran."""
    import dataclasses

    made = Provenance(_fresh(kind), signer, "{}")
    assert (made.kind, made.signer) == (kind, signer)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.signer = None  # type: ignore[misc]


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="provenance must be one of"):
        Provenance("measured", "alice (SHA256:al)")
