"""Build records come home through the CLI: publish --sign, verify, import, report, with real ssh-keygen keys and a
real SQLite file. The signer comes from allowed_signers and the cell from the recipes' recomputation of the record's
context, never from the record; a forged, edited or foreign record is refused, naming the check."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.attest import build_signing, signing
from builder.cli import main
from builder.paths import BUILD_RECORD
from builder.store.store import MatrixStore
from build_record_fixtures import ROCM_SOURCE, make_key, record, rendered, signer_line, write_record
from repo import REPO_ROOT

CPU_KEY, SOURCE_KEY = "cpu-torch2.13-py3.11", "rocm6.2-torch2.4-gfx90a-py3.10"
FAIL_REQUEST = {"accel_version": "6.2", "torch": "2.5", "base_image": "envbuild-local/debian:bookworm"}
FAIL_KEY = "rocm6.2-torch2.5-gfx90a-py3.10"
COMMAND = "envbuild image --flavor cpu --torch 2.13"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": "240"})


@pytest.fixture()
def home(tmp_path, monkeypatch):
    """A contributor's clone: results/allowed_signers holds their key; the commands run in it."""
    alice = make_key(tmp_path / "alice", "alice")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "allowed_signers").write_text(signer_line("alice@example.org", alice))
    monkeypatch.chdir(tmp_path)
    return tmp_path, alice


def publish(path: Path, name: str, key: Path | None, *extra):
    sign = ["--sign", key, "--command", COMMAND] if key else []
    return invoke("matrix", "publish", path, "--name", name, *sign, *extra)


def test_a_passing_and_a_failing_record_are_signed_verified_imported_and_on_the_ladder(home):
    folder, alice = home
    passing = write_record(folder / "attempt-pass", record("pass"))
    failing = write_record(folder / "attempt-fail", record("fail", manifest=rendered(**FAIL_REQUEST)))
    for path, name in ((passing, "alice-build"), (failing, "alice-fail")):
        out = publish(path, name, alice)
        assert out.exit_code == 0, out.output
    assert sorted(p.relative_to(folder / "results").as_posix() for p in (folder / "results").rglob("*.json*")) == [
        f"{CPU_KEY}/alice-build/build-record.json",
        f"{CPU_KEY}/alice-build/build-record.json.intoto.jsonl",
        f"{FAIL_KEY}/alice-fail/build-record.json",
        f"{FAIL_KEY}/alice-fail/build-record.json.intoto.jsonl",
    ]
    assert (folder / "results" / CPU_KEY / "alice-build" / BUILD_RECORD).read_bytes() == passing.read_bytes()

    verified = invoke("matrix", "verify")  # no path: ./results, checked against ./results/allowed_signers
    assert verified.exit_code == 0, verified.output
    assert "signers: results/allowed_signers (the working folder's results/)" in verified.stderr
    assert f"build of {CPU_KEY} (pass)" in verified.stdout and f"build of {FAIL_KEY} (fail)" in verified.stdout
    assert "2 verified, 0 failed, 0 unreadable" in verified.stderr

    db = folder / "m.db"
    imported = invoke("matrix", "import", "--db", db, "results")
    assert imported.exit_code == 0, imported.output
    assert "2 new build(s)" in imported.stdout
    with MatrixStore.open(db, readonly=True) as store:
        builds = {b["cell_key"]: b for b in store.builds()}
    assert {k: (b["status"], b["provenance"], b["signer"].split(" (")[0]) for k, b in builds.items()} == {
        CPU_KEY: ("pass", "contributed", "alice@example.org"),
        FAIL_KEY: ("fail", "contributed", "alice@example.org"),
    }
    again = invoke("matrix", "import", "--db", db, "results")
    assert again.exit_code == 0 and "0 new build(s)" in again.stdout

    site = folder / "site"
    report = invoke("report", "--db", db, "-o", site)
    assert report.exit_code == 0, report.output
    cpu = _step(site, CPU_KEY, 3)
    assert 'data-state="done"' in cpu and "built by alice@example.org at 2026-12-05T10:09:30Z" in cpu
    assert "contributed, signed by alice@example.org" in cpu
    assert 'data-state="done"' in _step(site, CPU_KEY, 4) and "5 checks passed" in _step(site, CPU_KEY, 4)
    fail = _step(site, FAIL_KEY, 3)
    assert 'data-state="failed"' in fail
    assert "a build signed by alice@example.org failed at step [base 3/10] RUN bash" in fail
    assert "compiling &lt;script&gt;alert(1)&lt;/script&gt; &amp; more\nfatal error: injected.h" in fail
    assert "<script>alert" not in (site / "cells" / f"{FAIL_KEY}.html").read_text()
    commands = re.search(r'id="next-commands">(.*?)</pre>', (site / "cells" / f"{FAIL_KEY}.html").read_text(), re.S)
    assert commands.group(1).startswith("envbuild image --rocm 6.2 --torch 2.5")  # anyone can still build it


def _step(site: Path, key: str, number: int) -> str:
    page = (site / "cells" / f"{key}.html").read_text()
    return re.search(rf'<tr class="step-[a-z]*" data-step="{number}".*?</tr>', page, re.S).group(0)


def test_a_signed_pass_of_an_unproven_source_cell_is_built_by_its_signer_everywhere(home):
    folder, alice = home
    path = write_record(folder / "a", record("pass", manifest=rendered(**ROCM_SOURCE)))
    assert publish(path, "mi250x-build", alice).exit_code == 0
    db = folder / "m.db"
    assert invoke("matrix", "import", "--db", db, "results").exit_code == 0
    site, summary = folder / "site", folder / "summary.md"
    assert invoke("report", "--db", db, "-o", site).exit_code == 0
    page = (site / "cells" / f"{SOURCE_KEY}.html").read_text()
    assert '<span class="proven" id="proven-by"' in page and "built by alice@example.org</span>" in page
    assert '<span class="unproven"' not in page
    assert invoke("report", "--db", db, "--markdown", summary).exit_code == 0
    assert re.search(rf"\| {re.escape(SOURCE_KEY)} \| [a-z]+ \(built by alice@example\.org\) \|", summary.read_text())
    # the same build, unsigned: nobody vouches for it, its evidence step does not move
    plain_db = folder / "plain.db"
    unsigned = folder / "unsigned"
    unsigned.mkdir()
    shutil.copyfile(path, unsigned / BUILD_RECORD)
    assert invoke("matrix", "import", "--db", plain_db, unsigned).exit_code == 0
    plain_site = folder / "plain-site"
    assert invoke("report", "--db", plain_db, "-o", plain_site, "--no-results").exit_code == 0
    plain_page = (plain_site / "cells" / f"{SOURCE_KEY}.html").read_text()
    assert 'id="proven-by"' not in plain_page and "built by alice" not in plain_page


def test_a_record_edited_after_signing_or_signed_by_a_stranger_is_refused_and_nothing_imported(home, tmp_path):
    folder, alice = home
    assert publish(write_record(folder / "a", record("pass")), "b", alice).exit_code == 0
    published = folder / "results" / CPU_KEY / "b" / BUILD_RECORD
    published.write_text(published.read_text().replace('"wall_time_s": 570.0', '"wall_time_s": 57.0'))
    db = folder / "m.db"
    refused = invoke("matrix", "import", "--db", db, "results")
    assert refused.exit_code == 1 and "[result_digest]" in refused.output and not db.exists()
    assert "the build record changed after it was signed" in refused.output

    stranger = make_key(tmp_path / "mallory", "mallory")
    other = folder / "other"
    path = write_record(other / "x", record("pass"))
    build_signing.attest(path, stranger, commands=[COMMAND], envbuild_version="0.1.0")
    out = invoke("matrix", "verify", other)
    assert out.exit_code == 1 and "[signer]" in out.output and "is not in results/allowed_signers" in out.output


def test_a_run_attestation_never_passes_for_a_build_nor_a_build_attestation_for_a_run(home):
    folder, alice = home
    path = write_record(folder / "a", record("pass"))
    assert publish(path, "b", alice).exit_code == 0
    published = folder / "results" / CPU_KEY / "b"
    run = REPO_ROOT / "results" / CPU_KEY / "container-smoke"
    swapped = folder / "swapped"
    swapped.mkdir()
    shutil.copyfile(published / BUILD_RECORD, swapped / BUILD_RECORD)
    shutil.copyfile(run / "result.json.intoto.jsonl", swapped / build_signing.BUILD_ATTESTATION_NAME)
    allowed = REPO_ROOT / "results" / "allowed_signers"
    out = invoke("matrix", "verify", swapped, "--allowed-signers", allowed)
    assert out.exit_code == 1 and "[statement]" in out.output and "urn:envbuild:predicate:build:v1" in out.output
    as_run = folder / "as-run"
    shutil.copytree(run, as_run)
    shutil.copyfile(published / build_signing.BUILD_ATTESTATION_NAME, as_run / signing.ATTESTATION_NAME)
    out = invoke("matrix", "verify", as_run)
    assert out.exit_code == 1 and "[statement]" in out.output and "urn:envbuild:predicate:run:v1" in out.output


def test_the_cell_comes_from_the_context_never_from_the_record(home):
    folder, alice = home
    lying = record("pass", cell={**record("pass")["cell"], "python": "3.12"})
    out = publish(write_record(folder / "lie", lying), "lie", alice)
    assert (
        out.exit_code == 2 and "names cell cpu-torch2.13-py3.12, but its context is cpu-torch2.13-py3.11" in out.output
    )
    assert not (folder / "results" / "cpu-torch2.13-py3.12").exists()

    foreign = record("pass", context_hash="ab" * 32)  # built from other recipes: no context here has that hash
    out = publish(write_record(folder / "foreign", foreign), "foreign", alice)
    assert out.exit_code == 2 and "other recipes or another envbuild version" in out.output
    assert sorted(p.name for p in (folder / "results").iterdir()) == ["allowed_signers"]
    # signed by hand all the same: verify and import fail it with [cell], nothing is imported
    signed = write_record(folder / "results" / CPU_KEY / "foreign", foreign)
    build_signing.attest(signed, alice, commands=[COMMAND], envbuild_version="0.1.0")
    out = invoke("matrix", "verify")
    assert out.exit_code == 1 and "[cell]" in out.output
    db = folder / "m.db"
    out = invoke("matrix", "import", "--db", db, "results")
    assert out.exit_code == 1 and "[cell]" in out.output and not db.exists()
    report = invoke("report", "-o", folder / "site", "--no-recipes")
    assert report.exit_code == 0 and "left out of the report" in report.stderr and "[cell]" in report.stderr


def test_an_unsigned_record_imports_unsigned_and_does_not_verify(home):
    folder, _ = home
    path = write_record(folder / "results" / CPU_KEY / "plain", record("pass"))
    out = invoke("matrix", "verify")
    assert out.exit_code == 1 and "[unsigned]" in out.output
    db = folder / "m.db"
    assert invoke("matrix", "import", "--db", db, path).exit_code == 0
    with MatrixStore.open(db, readonly=True) as store:
        (build,) = store.builds()
    assert (build["provenance"], build["signer"], build["record"]["build_id"]) == ("unsigned", None, build["build_uid"])


def test_signing_a_build_already_recorded_here_gives_it_the_signature_and_revocation_takes_it_away(home, tmp_path):
    folder, alice = home
    doc = record("pass")
    db = folder / "m.db"
    with MatrixStore.open(db) as store:  # the owner's own `envbuild image` recorded it, unsigned
        store.record_build(
            _cell(doc), status="pass", build_uid=doc["build_id"], record=doc, image_digest=doc["image"]["digest"]
        )
    assert publish(write_record(folder / "attempt", doc), "b", alice).exit_code == 0
    assert invoke("matrix", "import", "--db", db, "results").exit_code == 0
    with MatrixStore.open(db, readonly=True) as store:
        (build,) = store.builds()
    assert build["provenance"] == "contributed"
    site = folder / "site"
    assert invoke("report", "--db", db, "-o", site, "--no-results").exit_code == 0
    assert "built by alice@example.org" in _step(site, CPU_KEY, 3)
    (folder / "results" / "revoked_signers").write_text(Path(f"{alice}.pub").read_text())
    revoked_site = folder / "revoked-site"
    out = invoke("report", "--db", db, "-o", revoked_site, "--no-results")
    assert out.exit_code == 0 and "revoked: results/revoked_signers" in out.stderr
    step = _step(revoked_site, CPU_KEY, 3)
    assert "built by" not in step and "revoked: signed by alice@example.org" in step


def _cell(doc):
    from builder.plan.cells import Cell

    return Cell(**doc["cell"])


def test_verify_with_no_path_checks_the_working_folder_and_says_so_or_refuses(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = invoke("matrix", "verify")
    assert out.exit_code == 2 and "no ./results folder here" in out.output
    bundled = invoke("matrix", "verify", REPO_ROOT / "results" / CPU_KEY)
    assert bundled.exit_code == 0, bundled.output
    assert "(bundled with this envbuild; no ./results/allowed_signers here)" in bundled.stderr
    explicit = invoke(
        "matrix",
        "verify",
        REPO_ROOT / "results" / CPU_KEY,
        "--allowed-signers",
        REPO_ROOT / "results" / "allowed_signers",
    )
    assert explicit.exit_code == 0 and "(--allowed-signers)" in explicit.stderr
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "allowed_signers").write_text("")  # a clone whose file lists nobody: nothing verifies
    out = invoke("matrix", "verify", REPO_ROOT / "results" / CPU_KEY)
    assert out.exit_code == 1 and "[signer]" in out.output and "the working folder's results/" in out.stderr


def test_publish_refuses_a_record_that_breaks_the_schema_and_leaves_nothing(home):
    folder, alice = home
    doc = record("pass")
    doc["status"] = "fail"
    out = publish(write_record(folder / "bad", doc), "bad", alice)
    assert out.exit_code == 2 and "not a build record as docs/build-record.md says" in out.output
    assert sorted(p.name for p in (folder / "results").iterdir()) == ["allowed_signers"]
    json_file = folder / "named.json"
    json_file.write_text(json.dumps(record("pass")))
    out = publish(json_file, "by-format", alice)  # a record under another name: known by its format
    assert out.exit_code == 0, out.output
    assert (folder / "results" / CPU_KEY / "by-format" / BUILD_RECORD).read_bytes() == json_file.read_bytes()
    no_commands = invoke("matrix", "publish", json_file, "--name", "x", "--sign", alice)
    assert no_commands.exit_code == 2 and "--command" in no_commands.output


def test_report_check_fails_on_a_committed_build_record_that_does_not_verify_and_warns_on_a_stale_one(home):
    folder, alice = home
    assert publish(write_record(folder / "a", record("pass")), "b", alice).exit_code == 0
    db, summary = folder / "m.db", folder / "summary.md"
    assert invoke("matrix", "import", "--db", db, "results").exit_code == 0
    assert invoke("report", "--db", db, "--markdown", summary).exit_code == 0
    assert invoke("report", "--db", db, "--markdown", summary, "--check").exit_code == 0
    stale = write_record(folder / "results" / CPU_KEY / "older", record("pass", context_hash="ab" * 32))
    build_signing.attest(stale, alice, commands=[COMMAND], envbuild_version="0.1.0")
    warned = invoke("report", "--db", db, "--markdown", summary, "--check")
    assert warned.exit_code == 0 and "warning: results/" in warned.stderr and "[cell]" in warned.stderr
    good = folder / "results" / CPU_KEY / "b" / BUILD_RECORD
    good.write_text(good.read_text().replace('"wall_time_s": 570.0', '"wall_time_s": 5.0'))
    failed = invoke("report", "--db", db, "--markdown", summary, "--check")
    assert failed.exit_code == 1 and "[result_digest]" in failed.stderr
