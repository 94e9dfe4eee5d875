"""Revocation reaches stored runs: the report derives every signed run's provenance again
from its stored attestation and the current allowed_signers and revocation list, on every build. A run whose
key was revoked (or removed) after it was imported shows "revoked" and drops out of --published, with no
re-import. Real ssh-keygen keys, real CLI, a real SQLite file."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from click.testing import CliRunner

from builder.cli import main
from builder.store.store import MatrixStore
from repo import REPO_ROOT

CPU_RUN = REPO_ROOT / "results" / "cpu-torch2.13-py3.11" / "container-smoke"
CPU_KEY = "cpu-torch2.13-py3.11"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": "240"})


def signed_import(tmp_path: Path):
    key = tmp_path / "alice"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", str(key)], check=True)
    public = " ".join(Path(f"{key}.pub").read_text().split()[:2])
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'alice namespaces="envbuild" {public}\n')
    folder = tmp_path / "results" / "run"
    folder.mkdir(parents=True)
    shutil.copyfile(CPU_RUN / "result.json", folder / "result.json")
    assert invoke("matrix", "sign", folder / "result.json", "--key", key, "--command", "envbuild run").exit_code == 0
    db = tmp_path / "m.db"
    imported = invoke("matrix", "import", "--db", db, folder, "--allowed-signers", allowed)
    assert imported.exit_code == 0, imported.output
    return db, allowed, public


def report(db: Path, site: Path, allowed: Path, *extra) -> str:
    out = invoke("report", "--db", db, "--no-recipes", "-o", site, "--allowed-signers", allowed, *extra)
    assert out.exit_code == 0, out.output
    return (site / "index.html").read_text()


def test_a_revoked_key_turns_its_stored_runs_revoked_and_out_of_published(tmp_path):
    db, allowed, public = signed_import(tmp_path)
    none = tmp_path / "no-revocations"
    none.write_text("")
    assert "contributed, signed by alice" in report(db, tmp_path / "before", allowed, "--revoked", none)
    revoked = tmp_path / "revoked_signers"
    revoked.write_text(public + "\n")
    index = report(db, tmp_path / "after", allowed, "--revoked", revoked)
    assert "revoked: signed by alice" in index and "contributed, signed by alice" not in index
    assert 'data-provenance="revoked"' in index
    published = report(db, tmp_path / "published", allowed, "--revoked", revoked, "--published")
    assert "alice" not in published and CPU_KEY not in (tmp_path / "published" / "data.json").read_text()
    with MatrixStore.open(db, readonly=True) as store:  # nothing re-imported, nothing rewritten
        assert [r["provenance"] for r in store.runs()] == ["contributed"]


def test_a_key_removed_from_allowed_signers_is_revoked_at_the_next_build(tmp_path):
    db, allowed, _ = signed_import(tmp_path)
    allowed.write_text("# alice's key was removed\n")
    index = report(db, tmp_path / "site", allowed)
    assert "revoked: signed by alice" in index
    assert "alice" not in report(db, tmp_path / "pub", allowed, "--published")


def test_a_broken_allowed_signers_is_bad_input_for_the_report(tmp_path):
    db, allowed, public = signed_import(tmp_path)
    allowed.write_text(f'* cert-authority,namespaces="envbuild" {public}\n')
    out = invoke("report", "--db", db, "--no-recipes", "-o", tmp_path / "site", "--allowed-signers", allowed)
    assert out.exit_code == 2 and "cert-authority" in out.output and not (tmp_path / "site").exists()
