"""Build records in the matrix file: stored with the build (checked at the write), one record per build id, a signed
provenance taking over an unsigned row of the same record only, carried by a merge (unsigned) and refused there
when broken; revocation at read time through `build_provenance_now`."""

from __future__ import annotations

import json
import sqlite3

import pytest

from builder.plan.cells import Cell
from builder.store.provenance import REVOKED, Provenance
from builder.store.store import InvalidResultError, MatrixStore, StoreError
from build_record_fixtures import record

CELL = Cell(flavor="cpu", torch="2.13", python="3.11")
SIGNED = Provenance.signed("alice@example.org", "SHA256:abc", '{"payload": "..."}')


def _build(store, doc, provenance=None):
    return store.record_build(
        CELL,
        status=doc["status"],
        build_uid=doc["build_id"],
        record=doc,
        provenance=provenance,
        failure_class=(doc.get("failure") or {}).get("failure_class"),
    )


def test_a_record_is_stored_with_its_build_and_read_back_checked(tmp_path):
    doc = record("fail")
    with MatrixStore.open(tmp_path / "m.db") as store:
        _build(store, doc)
        (build,) = store.builds()
        assert build["record"] == doc and (build["provenance"], build["signer"]) == ("unsigned", None)
        with pytest.raises(InvalidResultError, match="build record does not follow docs/build-record.md"):
            store.record_build(CELL, status="pass", build_uid="b2", record={**doc, "status": "pass"})
        assert len(store.builds()) == 1


def test_a_signature_takes_over_the_same_record_only_and_never_leaves_again(tmp_path):
    doc = record("pass")
    with MatrixStore.open(tmp_path / "m.db") as store:
        first = _build(store, doc)
        assert _build(store, doc, SIGNED) == first
        (build,) = store.builds()
        assert (build["provenance"], build["signer"]) == ("contributed", "alice@example.org (SHA256:abc)")
        assert _build(store, doc) == first  # an unsigned copy again changes nothing
        assert store.builds()[0]["provenance"] == "contributed"
        other = record("pass", build_id="otherbuild")
        _build(store, other)
        with pytest.raises(StoreError, match="already recorded with another build record"):
            _build(store, {**other, "wall_time_s": 1.0}, SIGNED)
        assert {b["build_uid"]: b["provenance"] for b in store.builds()}["otherbuild"] == "unsigned"
        store.build_provenance_now = {first: Provenance(REVOKED, build["signer"], "{}")}
        assert [b["provenance"] for b in store.builds() if b["id"] == first] == ["revoked"]


def test_a_merge_carries_the_record_unsigned_and_refuses_a_broken_one(tmp_path):
    doc = record("pass")
    with MatrixStore.open(tmp_path / "job.db") as store:
        _build(store, doc, SIGNED)
    with MatrixStore.open(tmp_path / "m.db") as store:
        store.merge_from(tmp_path / "job.db")
        (build,) = store.builds()
    assert build["record"] == doc and build["provenance"] == "unsigned"  # another file's signature is a claim
    conn = sqlite3.connect(tmp_path / "job.db")
    conn.execute("UPDATE builds SET record_json = ?", (json.dumps({**doc, "status": "maybe"}),))
    conn.commit()
    conn.close()
    with MatrixStore.open(tmp_path / "other.db") as store:
        with pytest.raises(InvalidResultError, match="record_json"):
            store.merge_from(tmp_path / "job.db")
        assert store.builds() == []
