"""Which attempt files a report publishes and a merge copies (builder/store/attempt_files.py): only regular files
of known names, in an attempt folder directly under the matrix file's own `envbuild-attempts/`, never a link and
never a path that data names. Real folders, files and links in tmp dirs; the merge goes through
`envbuild matrix import` with real SQLite files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.store import attempt_files
from builder.store.attempt_files import adopt_attempt, attempt_log, attempt_root, read_tail
from builder.store.store import MatrixStore
from matrix_fixtures import cpu_result

NAME = "20261202T130041Z-run-abc"
STORED = f"envbuild-attempts/{NAME}"


def attempt(base: Path, name: str = NAME, **files: str) -> Path:
    """An attempt folder `name` under `base`'s envbuild-attempts/ holding `files` (build_log="..." is build.log)."""
    folder = base / "envbuild-attempts" / name
    folder.mkdir(parents=True)
    for file, text in files.items():
        (folder / file.replace("_", ".")).write_text(text)
    return folder


# ---- attempt_log: what a report may open -----------------------------------------------------------------------
def test_the_first_known_log_of_an_attempt_folder_is_published(tmp_path):
    db = tmp_path / "m.db"
    folder = attempt(tmp_path, workload_log="w\n")
    assert attempt_log(db, STORED) == (folder / "workload.log", "")  # build.log and container.log are absent
    (folder / "container.log").write_text("c\n")
    assert attempt_log(db, STORED) == (folder / "container.log", "")  # the first name that is there
    assert attempt_log(db, STORED, ("workload.log", "container.log")) == (folder / "workload.log", "")
    assert attempt_log(db, STORED, ("attempt.json",)) == (None, "")  # simply no log: nothing to warn about


@pytest.mark.parametrize("name", ["20261202T130041Z-build-" + "a" * 64, "20261202T130041Z-run-a.b_c-D9"])
def test_every_folder_name_the_store_creates_is_accepted(tmp_path, name):
    folder = attempt(tmp_path, name, build_log="b\n")
    assert attempt_log(tmp_path / "m.db", f"envbuild-attempts/{name}") == (folder / "build.log", "")


@pytest.mark.parametrize(
    "stored",
    [
        "/etc",
        "envbuild-attempts",
        f"{STORED}/build.log",
        f"other/{NAME}",
        f"a/{NAME}",
        f"./{STORED}/x",
        f"../{STORED}",
        "envbuild-attempts/20261202T130041Z-test-abc",
        "envbuild-attempts/20261202T130041-run-abc",
        "envbuild-attempts/2026120T130041Z-run-abc",
        "envbuild-attempts/20261202T130041Z-run-",
        "envbuild-attempts/20261202T130041Z-run-" + "a" * 65,
        "envbuild-attempts/20261202T130041Z-run-a b",
        f"envbuild-attempts/{NAME}\n",
        f"envbuild-attempts/x{NAME}",
    ],
)
def test_a_folder_the_store_did_not_create_is_never_opened(tmp_path, stored):
    db = tmp_path / "m.db"
    attempt(tmp_path, build_log="b\n")
    path, why = attempt_log(db, stored)
    assert path is None and why == f"attempt directory {stored!r} is not one this matrix file's store created"


def test_an_absolute_path_to_a_real_attempt_folder_is_refused(tmp_path):
    folder = attempt(tmp_path, build_log="b\n")
    assert attempt_log(tmp_path / "m.db", str(folder))[0] is None
    assert attempt_log(tmp_path / "m.db", "") == (None, "") and attempt_log(tmp_path / "m.db", None) == (None, "")


def test_links_are_never_followed(tmp_path):
    db = tmp_path / "m.db"
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "build.log").write_text("SECRET\n")
    root = tmp_path / "envbuild-attempts"
    root.mkdir()
    os.symlink(secret, root / NAME)  # the attempt folder a link
    assert attempt_log(db, STORED) == (None, f"{root / NAME} is a symbolic link")

    other = tmp_path / "other"
    (other / "envbuild-attempts" / NAME).mkdir(parents=True)
    (other / "envbuild-attempts" / NAME / "build.log").write_text("SECRET\n")
    (tmp_path / "b").mkdir()
    os.symlink(other / "envbuild-attempts", tmp_path / "b" / "envbuild-attempts")  # the attempt root a link
    path, why = attempt_log(tmp_path / "b" / "m.db", STORED)
    assert path is None and why.endswith("is a symbolic link")

    folder = attempt(tmp_path / "c")
    os.symlink(secret / "build.log", folder / "build.log")  # the log a link
    (folder / "container.log").write_text("fine\n")
    assert attempt_log(tmp_path / "c" / "m.db", STORED) == (
        None,
        f"{folder / 'build.log'} is not a regular file (a link or something else)",
    )


def test_a_log_that_is_not_a_regular_file_is_refused(tmp_path):
    folder = attempt(tmp_path)
    (folder / "build.log").mkdir()
    assert attempt_log(tmp_path / "m.db", STORED) == (
        None,
        f"{folder / 'build.log'} is not a regular file (a link or something else)",
    )


def test_an_attempt_that_is_a_file_names_the_error(tmp_path):
    root = tmp_path / "envbuild-attempts"
    root.mkdir()
    (root / NAME).write_text("a file where the folder should be\n")
    assert attempt_log(tmp_path / "m.db", STORED) == (None, f"{root / NAME / 'build.log'}: Not a directory")


def test_the_attempt_root_is_beside_the_real_matrix_file(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    assert attempt_root(tmp_path / "link" / "m.db") == tmp_path / "real" / "envbuild-attempts"
    folder = attempt(tmp_path / "real", build_log="b\n")
    assert attempt_log(tmp_path / "link" / "m.db", STORED) == (folder / "build.log", "")


# ---- read_tail ---------------------------------------------------------------------------------------------------
def test_read_tail_keeps_the_last_bytes(tmp_path):
    log = tmp_path / "build.log"
    log.write_bytes(b"0123456789")
    assert read_tail(log, 4) == b"6789"
    assert read_tail(log, 10) == b"0123456789"
    assert read_tail(log, 100) == b"0123456789"  # shorter than the limit: all of it
    assert read_tail(log, 0) == b""


def test_read_tail_does_not_follow_a_final_link(tmp_path):
    (tmp_path / "secret").write_bytes(b"SECRET")
    os.symlink(tmp_path / "secret", tmp_path / "build.log")
    with pytest.raises(OSError):
        read_tail(tmp_path / "build.log", 100)


# ---- adopt_attempt: what a merge copies ------------------------------------------------------------------------------
def test_a_merge_copies_only_the_known_regular_files(tmp_path):
    source, target = tmp_path / "ci" / "matrix.db", tmp_path / "m.db"
    folder = attempt(tmp_path / "ci", build_log="b\n", result_json="{}", notes_txt="not copied")
    (folder / "attempt.json").write_text(json.dumps({"id": "r1"}))
    (folder / "context").mkdir()
    (folder / "context" / "Dockerfile").write_text("FROM x\n")
    (tmp_path / "secret").write_text("SECRET\n")
    os.symlink(tmp_path / "secret", folder / "workload.log")
    assert adopt_attempt(source, STORED, target) == STORED
    copied = tmp_path / "envbuild-attempts" / NAME
    assert sorted(p.name for p in copied.iterdir()) == ["attempt.json", "build.log", "result.json"]
    assert (copied / "build.log").read_text() == "b\n" and (copied / "result.json").read_text() == "{}"


def test_a_merge_takes_the_absolute_path_the_store_hands_over(tmp_path):
    source, target = tmp_path / "ci" / "matrix.db", tmp_path / "m.db"
    folder = attempt(tmp_path / "ci", container_log="c\n")
    assert adopt_attempt(source, str(folder), target) == STORED
    assert (tmp_path / STORED / "container.log").read_text() == "c\n"


@pytest.mark.parametrize(
    "stored",
    [
        "",
        None,
        "/etc",
        "ci/envbuild-attempts/x",
        f"{STORED}/build.log",
        f"other/{NAME}",
        "envbuild-attempts/not-an-attempt",
    ],
)
def test_a_merge_copies_nothing_from_a_folder_the_source_did_not_create(tmp_path, stored):
    attempt(tmp_path / "ci", build_log="b\n")
    (tmp_path / "ci" / "other" / NAME).mkdir(parents=True)
    (tmp_path / "ci" / "other" / NAME / "build.log").write_text("b\n")
    assert adopt_attempt(tmp_path / "ci" / "matrix.db", stored, tmp_path / "m.db") is None
    assert not (tmp_path / "envbuild-attempts").exists()


def test_a_merge_of_an_absolute_folder_outside_or_below_the_source_root_copies_nothing(tmp_path):
    folder = attempt(tmp_path / "ci", build_log="b\n")
    (folder / "deeper").mkdir()
    for stored in (str(folder / "deeper"), str(tmp_path / "elsewhere" / NAME), str(tmp_path / "ci" / NAME)):
        assert adopt_attempt(tmp_path / "ci" / "matrix.db", stored, tmp_path / "m.db") is None
    assert not (tmp_path / "envbuild-attempts").exists()


def test_an_attempt_with_nothing_to_copy_is_not_adopted(tmp_path):
    folder = attempt(tmp_path / "ci", notes_txt="x")
    (folder / "context").mkdir()
    assert adopt_attempt(tmp_path / "ci" / "matrix.db", STORED, tmp_path / "m.db") is None
    assert not (tmp_path / "envbuild-attempts").exists()


def test_a_long_log_keeps_its_tail(tmp_path):
    folder = attempt(tmp_path / "ci")
    limit = attempt_files.ADOPT_LIMIT_BYTES
    assert limit == 64 * 2**20
    with open(folder / "build.log", "wb") as handle:
        handle.truncate(limit + 5)  # sparse: cheap to write
        handle.seek(0)
        handle.write(b"HEAD!")
        handle.seek(limit + 5 - 4)
        handle.write(b"TAIL")
    assert adopt_attempt(tmp_path / "ci" / "matrix.db", STORED, tmp_path / "m.db") == STORED
    copied = (tmp_path / STORED / "build.log").read_bytes()
    assert len(copied) == limit and copied.endswith(b"TAIL") and not copied.startswith(b"HEAD!")


@pytest.mark.parametrize(
    "record, ident, adopted",
    [
        ({"kind": "run", "id": "r1"}, "r1", True),
        ({"kind": "run", "id": "r1"}, "r2", False),
        ({"kind": "run", "id": "r1"}, None, False),
        ({"kind": "run"}, "r1", False),
        ({"kind": "run", "id": 1}, "1", False),
        (["r1"], "r1", False),
        ("{not json", "r1", False),
        (None, "r1", False),  # no attempt.json
    ],
)
def test_a_folder_already_there_is_adopted_only_by_its_own_run(tmp_path, record, ident, adopted):
    attempt(tmp_path / "ci", build_log="theirs\n")
    here = attempt(tmp_path, build_log="ours\n")
    if record is not None:
        (here / "attempt.json").write_text(record if isinstance(record, str) else json.dumps(record))
    got = adopt_attempt(tmp_path / "ci" / "matrix.db", STORED, tmp_path / "m.db", ident)
    assert got == (STORED if adopted else None)
    assert (here / "build.log").read_text() == "ours\n"  # kept as it is, never overwritten


def test_a_folder_already_there_whose_record_is_a_link_is_not_adopted(tmp_path):
    attempt(tmp_path / "ci", build_log="theirs\n")
    here = attempt(tmp_path)
    (tmp_path / "record.json").write_text(json.dumps({"id": "r1"}))
    os.symlink(tmp_path / "record.json", here / "attempt.json")
    assert adopt_attempt(tmp_path / "ci" / "matrix.db", STORED, tmp_path / "m.db", "r1") is None
    os.unlink(here / "attempt.json")
    os.rmdir(here)
    os.symlink(tmp_path / "nowhere", here)  # a dangling link where the folder would go
    assert adopt_attempt(tmp_path / "ci" / "matrix.db", STORED, tmp_path / "m.db", "r1") is None
    assert os.path.islink(here) and not (tmp_path / "nowhere").exists()


# ---- through the door: `envbuild matrix import` of a CI job's matrix file -------------------------------------------
def test_importing_a_ci_matrix_file_adopts_its_attempt_and_the_report_publishes_its_log(tmp_path):
    ci = tmp_path / "ci"
    result = cpu_result()
    folder = attempt(ci, container_log="step 1 loss 1.95\n")
    (folder / "attempt.json").write_text(json.dumps({"kind": "run", "id": result["run_id"]}))
    (folder / "notes.txt").write_text("SECRET-NOTES\n")
    with MatrixStore.open(ci / "matrix.db") as store:
        store.record_run(result, attempt_dir=STORED)
    db = tmp_path / "here" / "m.db"
    db.parent.mkdir()
    imported = CliRunner().invoke(main, ["matrix", "import", str(ci / "matrix.db"), "--db", str(db)])
    assert imported.exit_code == 0, imported.output
    adopted = db.parent / STORED
    assert sorted(p.name for p in adopted.iterdir()) == ["attempt.json", "container.log"]
    with MatrixStore.open(db, readonly=True) as store:
        assert [r["attempt_dir"] for r in store.runs()] == [STORED]
    site = tmp_path / "site"
    report = CliRunner().invoke(main, ["report", "-o", str(site), "--db", str(db), "--no-recipes"])
    assert report.exit_code == 0, report.output
    logs = list((site / "logs").iterdir())
    assert [p.read_text() for p in logs] == ["step 1 loss 1.95\n"]
    assert "SECRET-NOTES" not in "".join(p.read_text(errors="replace") for p in site.rglob("*") if p.is_file())


@pytest.mark.parametrize("stored", [f"other/{NAME}", f"envbuild-attempts/{NAME}/x", f"{NAME}"])
def test_a_folder_already_there_is_never_claimed_through_a_path_the_store_did_not_create(tmp_path, stored):
    """The target holds the run's own folder; a row naming it by another path still gets none."""
    here = attempt(tmp_path, build_log="ours\n")
    (here / "attempt.json").write_text(json.dumps({"id": "r1"}))
    (tmp_path / "ci" / "other" / NAME).mkdir(parents=True)
    assert adopt_attempt(tmp_path / "ci" / "matrix.db", stored, tmp_path / "m.db", "r1") is None
    assert adopt_attempt(tmp_path / "ci" / "matrix.db", STORED, tmp_path / "m.db", "r1") == STORED


@pytest.mark.parametrize("size, adopted", [(2**20, True), (2**20 + 1, False), (2**19 + 1, True)])
def test_a_record_is_read_up_to_one_mebibyte(tmp_path, size, adopted):
    """An attempt.json past 1 MiB is not read whole (its tail is no JSON): the folder is not claimed by it."""
    attempt(tmp_path / "ci", build_log="theirs\n")
    here = attempt(tmp_path)
    head = json.dumps({"id": "r1", "pad": ""})
    (here / "attempt.json").write_text(head[:-2] + "x" * (size - len(head)) + '"}')
    assert (here / "attempt.json").stat().st_size == size
    got = adopt_attempt(tmp_path / "ci" / "matrix.db", STORED, tmp_path / "m.db", "r1")
    assert got == (STORED if adopted else None)
