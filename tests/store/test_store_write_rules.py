"""store_writes' rules one by one, on a real SQLite file and through the store's own reads: what a re-import,
a replacement, a signed re-import, a merge and a build record leave stored, and the refusals that keep a run
out of another cell."""

from __future__ import annotations

import copy
import dataclasses
import sqlite3

import pytest

from builder.store.provenance import CONTRIBUTED, UNSIGNED, Provenance
from builder.store.store import InvalidResultError, MatrixStore, RunConflictError
from builder.plan.cells import Cell
from matrix_fixtures import make_result

CELL = Cell(flavor="rocm", accel_version="6.2", torch="2.4", arch="gfx90a", python="3.10")
ALICE = Provenance(CONTRIBUTED, "alice (SHA256:aaaa)", '{"alice": true}')
BOB = Provenance(CONTRIBUTED, "bob (SHA256:bbbb)", '{"bob": true}')


def _changed(result: dict, wall_time_s: float) -> dict:
    other = copy.deepcopy(result)
    other["wall_time_s"] = wall_time_s
    return other


@pytest.mark.parametrize("wall_time_s", [10.0, 90.0])  # its stored JSON sorts before / after the first one's
def test_a_changed_run_under_the_same_id_is_a_conflict_whichever_way_it_sorts(tmp_path, wall_time_s):
    first = make_result()
    with MatrixStore.open(tmp_path / "m.db") as store:
        store.record_run(first)
        changed = _changed(first, wall_time_s)
        assert store.classify_run(first) == "identical" and store.classify_run(changed) == "conflict"
        with pytest.raises(RunConflictError, match="already recorded with other content"):
            store.record_run(changed)
        assert [r["result"] for r in store.runs()] == [first]


def test_a_replaced_run_leaves_only_its_new_probes(tmp_path):
    first = make_result()
    second = _changed(first, 90.0)
    second["probes"] = [
        {"name": "gemm_vs_fp64", "status": "fail", "values": {"rel_err": 0.3}, "message": "relative error 0.3 > 0.05"}
    ]
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        store.record_run(first)
        replaced = store.record_run(second, replace=True)
        assert replaced.outcome == "replaced" and replaced.inserted
        assert store.probe_rows(replaced.row_id) == [
            {
                "name": "gemm_vs_fp64",
                "status": "fail",
                "message": "relative error 0.3 > 0.05",
                "values": {"rel_err": 0.3},
            }
        ]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM probes WHERE run_row NOT IN (SELECT id FROM runs)").fetchone() == (0,)
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone() == (1,)


def test_a_probes_message_and_values_are_stored(tmp_path):
    result = make_result()
    result["probes"][1].update(status="fail", message="max abs error 0.2 > 0.01", values={"max_abs_err": 0.2})
    with MatrixStore.open(tmp_path / "m.db") as store:
        row = store.record_run(result).row_id
        rows = {p["name"]: p for p in store.probe_rows(row)}
    assert rows["sdpa_vs_math"]["message"] == "max abs error 0.2 > 0.01"
    assert rows["sdpa_vs_math"]["values"] == {"max_abs_err": 0.2}
    assert rows["device_discovery"] == {
        "name": "device_discovery",
        "status": "pass",
        "message": "",
        "values": {"device_count": 1},
    }


def test_the_speed_columns_come_from_the_results_metrics(tmp_path):
    with MatrixStore.open(tmp_path / "m.db") as store:
        store.record_run(make_result())
        [row] = store.train_metrics()
    assert (row["samples_per_s"], row["mfu"]) == (52.1, 0.21)


def test_a_signed_reimport_upgrades_an_unsigned_run_but_never_changes_its_signer(tmp_path):
    result = make_result()
    with MatrixStore.open(tmp_path / "m.db") as store:
        store.record_run(result)
        store.record_run(result)  # unsigned again: still unsigned
        assert (store.runs()[0]["provenance"], store.runs()[0]["signer"]) == (UNSIGNED, None)
        store.record_run(result, provenance=ALICE)
        assert (store.runs()[0]["provenance"], store.runs()[0]["signer"]) == (CONTRIBUTED, ALICE.signer)
        store.record_run(result, provenance=BOB)  # identical content signed by someone else: the first signer stays
        store.record_run(result)
        [run] = store.runs()
    assert (run["provenance"], run["signer"], run["attestation"]) == (CONTRIBUTED, ALICE.signer, ALICE.attestation)


def test_what_record_run_returns_cannot_be_changed():
    with pytest.raises(dataclasses.FrozenInstanceError):
        from builder.store.store import RecordedRun

        RecordedRun(1, "r", CELL.key, "new").outcome = "identical"


@pytest.mark.parametrize("other_first", [True, False])  # the other cell's row id below / above the run's cell's
def test_a_run_is_never_linked_to_a_build_of_another_cell(tmp_path, other_first):
    other = CELL.model_copy(update={"arch": "gfx942"})
    with MatrixStore.open(tmp_path / "m.db") as store:
        if other_first:
            build = store.record_build(other, status="pass")
            store.ensure_cell(CELL)
        else:
            store.ensure_cell(CELL)
            build = store.record_build(other, status="pass")
        with pytest.raises(
            InvalidResultError,
            match=f"is of cell {CELL.key}, but build {build} is of cell {other.key}; nothing was recorded",
        ):
            store.record_run(make_result(), build_id=build)
        with pytest.raises(InvalidResultError, match="but build 999 is of cell \\(none\\)"):
            store.record_run(make_result(), build_id=999)
        assert store.runs() == []


def test_a_run_links_to_its_cells_build_past_row_256(tmp_path):
    """Row ids are compared by value (ids above 256 are distinct int objects in CPython)."""
    with MatrixStore.open(tmp_path / "m.db") as store:
        for n in range(300):
            store.ensure_cell(CELL.model_copy(update={"python": f"3.{n + 100}"}))
        build = store.record_build(CELL, status="pass")
        assert store.ensure_cell(CELL) > 256
        store.record_run(make_result(), build_id=build)
        assert store.runs()[0]["build_id"] == build


def test_a_build_keeps_its_log_path_and_names_its_base_image(tmp_path):
    manifest = {"base_image": "rocm/dev-ubuntu-22.04:6.2", "cell": CELL.model_dump()}
    with MatrixStore.open(tmp_path / "m.db") as store:
        store.record_build(CELL, status="pass", log_path=tmp_path / "build.log", manifest=manifest, build_uid="a")
        store.record_build(CELL, status="pass", manifest=manifest, base_image="envbuild-local/rocm:6.2", build_uid="b")
        store.record_build(CELL, status="pass", base_image="envbuild-local/rocm:6.2", build_uid="c")
        store.record_build(CELL, status="pass", build_uid="d")
        builds = {b["build_uid"]: b for b in store.builds()}
    assert builds["a"]["log_path"] == str(tmp_path / "build.log") and builds["b"]["log_path"] is None
    assert [builds[u]["base_image"] for u in "abcd"] == [
        "rocm/dev-ubuntu-22.04:6.2",
        "envbuild-local/rocm:6.2",
        "envbuild-local/rocm:6.2",
        None,
    ]


def test_a_merge_never_replaces_a_run_unless_asked(tmp_path):
    first = make_result()
    with MatrixStore.open(tmp_path / "job.db") as job:
        job.record_run(_changed(first, 90.0))
    with MatrixStore.open(tmp_path / "m.db") as store:
        store.record_run(first)
        with pytest.raises(RunConflictError):
            store.merge_from(tmp_path / "job.db")
        assert [r["result"] for r in store.runs()] == [first]
        assert store.merge_from(tmp_path / "job.db", replace=True)[1] == {"new": 0, "identical": 0, "replaced": 1}


@pytest.mark.parametrize("arch", ["gfx908", "gfx950"])  # stored coordinates sorting before / after the cell's
def test_a_stored_cell_key_with_other_coordinates_is_never_joined(tmp_path, arch):
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        store.ensure_cell(CELL)
    with sqlite3.connect(db) as conn:  # as an older envbuild, whose keys could collide, might have written it
        conn.execute("UPDATE cells SET arch = ? WHERE key = ?", (arch, CELL.key))
    with MatrixStore.open(db) as store:
        with pytest.raises(
            InvalidResultError,
            match=f"cell key {CELL.key} in the matrix names other coordinates \\(rocm, 6.2, 2.4, {arch}, 3.10\\)",
        ):
            store.record_run(make_result())


def test_a_cells_coordinates_stored_under_another_key_are_never_joined(tmp_path):
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        store.ensure_cell(CELL)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE cells SET key = 'rocm6.2-torch2.4-gfx90a-py3.10-old' WHERE key = ?", (CELL.key,))
    with MatrixStore.open(db) as store:
        with pytest.raises(
            InvalidResultError,
            match=f"cell {CELL.key}: its coordinates are stored under another "
            "key; `envbuild matrix check` lists the row",
        ):
            store.record_run(make_result())
        assert store.runs() == []


def test_a_published_copy_leaves_out_unsigned_runs_and_those_revoked_since(tmp_path):
    from builder.store.provenance import REVOKED

    signed, other, unsigned = make_result(), make_result(), make_result()
    with MatrixStore.open(tmp_path / "m.db") as store:
        kept = store.record_run(signed, provenance=ALICE).row_id
        revoked = store.record_run(other, provenance=BOB).row_id
        store.record_run(unsigned)
        store.copy_published(tmp_path / "all.db")
        store.copy_published(tmp_path / "now.db", provenance_now={revoked: Provenance(REVOKED, BOB.signer, None)})
    with MatrixStore.open(tmp_path / "all.db", readonly=True) as copy:
        assert sorted(r["result"]["run_id"] for r in copy.runs()) == sorted([signed["run_id"], other["run_id"]])
    with MatrixStore.open(tmp_path / "now.db", readonly=True) as copy:
        assert [(r["row_id"], r["signer"]) for r in copy.runs()] == [(kept, ALICE.signer)]
