"""The matrix's writes: cells, builds, runs (idempotent on their ids), merging another matrix file. Each
write is one `BEGIN IMMEDIATE` transaction (`StoreConnection._write`); verdict or attempt follows
`verdict_rules.counts`."""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from pathlib import Path
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from builder.store import attempt_files, build_record_schema, verdict_rules
from builder.store.provenance import PUBLISHED, UNSIGNED, Provenance
from builder.store.store_schema import (
    BUILD_STATUSES,
    InvalidResultError,
    RunConflictError,
    StoreConnection,
    StoreError,
    canonical_json,
    validate_result,
)
from builder.plan.cells import Cell


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class RecordedRun:
    """What `record_run` did: outcome "new", "identical" (already there, nothing written) or "replaced"."""

    row_id: int
    run_id: str
    cell_key: str
    outcome: str

    @property
    def inserted(self) -> bool:
        return self.outcome != "identical"


class StoreWrites(StoreConnection):
    """The writes of `MatrixStore`."""

    def ensure_cell(self, cell: Cell) -> int:
        """The row id of `cell`, inserting it if new."""
        with self._write() as conn:
            return _ensure_cell(conn, cell)

    def record_build(
        self,
        cell: Cell,
        *,
        status: str,
        recipe_hash: str | None = None,
        context_hash: str | None = None,
        image_tag: str | None = None,
        image_digest: str | None = None,
        duration_s: float | None = None,
        log_path: str | os.PathLike | None = None,
        failure_class: str | None = None,
        error: str | None = None,
        manifest: dict | None = None,
        created_at: str | None = None,
        build_uid: str | None = None,
        attempt_dir: str | os.PathLike | None = None,
        base_image: str | None = None,
        base_digest: str | None = None,
        record: dict | None = None,
        provenance: Provenance | None = None,
    ) -> int:
        """Record one image build of `cell` ("pass" or "fail" with a `failure_class`); returns its id.

        `build_uid` (default: a new uuid4 hex) identifies the build across databases: recording the
        same uid again inserts nothing and returns the existing id (what merging CI databases relies on).
        Whether it is a verdict or only an attempt follows `verdict_rules.counts` (a failure on the input,
        e.g. `base_image_unavailable`, or `interrupted`, is an attempt). `base_image` defaults to the
        manifest's; `attempt_dir` is the build's own record (docs/matrix.md "Attempts"). `record`: its
        build-record.json (checked by build_record_schema here); `provenance`: who vouches for that record (default
        unsigned). A signed provenance for a build already recorded with the same record replaces an unsigned one;
        with another record it is refused (StoreError): one build id, one record.
        """
        if status not in BUILD_STATUSES:
            raise StoreError(f"build status must be one of {BUILD_STATUSES}, got {status!r}")
        if status == "fail" and not failure_class:
            raise StoreError("a failed build needs a failure_class (e.g. 'network', 'compile', 'oom')")
        provenance = provenance or Provenance()
        record_json = None
        if record is not None:
            try:
                record_json = canonical_json(build_record_schema.validate(record))
            except build_record_schema.BuildRecordError as exc:
                raise InvalidResultError(f"build record does not follow docs/build-record.md: {exc}") from None
        build_uid = build_uid or uuid.uuid4().hex
        with self._write() as conn:
            existing = conn.execute(
                "SELECT id, provenance, record_json FROM builds WHERE build_uid = ?", (build_uid,)
            ).fetchone()
            if existing:
                if provenance.kind != UNSIGNED and existing[1] == UNSIGNED:
                    if existing[2] != record_json:
                        raise StoreError(
                            f"build {build_uid} is already recorded with another build record; nothing was changed"
                        )
                    conn.execute(
                        "UPDATE builds SET provenance = ?, signer = ?, attestation_json = ? WHERE id = ?",
                        (provenance.kind, provenance.signer, provenance.attestation, existing[0]),
                    )
                return existing[0]
            cell_id = _ensure_cell(conn, cell)
            cur = conn.execute(
                "INSERT INTO builds (build_uid, cell_id, recipe_hash, context_hash, image_tag, image_digest,"
                " duration_s, log_path, status, failure_class, error, manifest_json, created_at, counts,"
                " attempt_dir, base_image, base_digest, provenance, signer, attestation_json, record_json)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    build_uid,
                    cell_id,
                    recipe_hash,
                    context_hash,
                    image_tag,
                    image_digest,
                    duration_s,
                    str(log_path) if log_path is not None else None,
                    status,
                    failure_class,
                    error,
                    json.dumps(manifest, sort_keys=True) if manifest is not None else None,
                    created_at or utc_now(),
                    int(verdict_rules.counts("build", status, failure_class)),
                    str(attempt_dir) if attempt_dir is not None else None,
                    base_image or (manifest or {}).get("base_image"),
                    base_digest,
                    provenance.kind,
                    provenance.signer,
                    provenance.attestation,
                    record_json,
                ),
            )
            return cur.lastrowid

    def classify_run(self, result: dict) -> str:
        """ "new", "identical" (same run_id, same content) or "conflict" (same run_id, other content)."""
        row = self._conn.execute("SELECT result_json FROM runs WHERE run_id = ?", (result["run_id"],)).fetchone()
        if row is None:
            return "new"
        return "identical" if row[0] == canonical_json(validate_result(result)) else "conflict"

    def record_run(
        self,
        result: dict,
        *,
        build_id: int | None = None,
        source: str | None = None,
        replace: bool = False,
        attempt_dir: str | os.PathLike | None = None,
        provenance: Provenance | None = None,
    ) -> RecordedRun:
        """Record a result.json (as a dict). Idempotent on `result["run_id"]`: the same content again writes nothing.

        The same run_id with other content raises RunConflictError, unless `replace` (the new content
        wins). Without `build_id`, the run is linked to the latest build whose image digest matches
        `result["image"]["digest"]`, if there is one. `source` notes where it came from (a file path).
        Verdict or attempt: `verdict_rules.counts`; the environment: the image manifest's base image and
        content hash, the linked build's base digest. `provenance`: who measured it (default: unsigned); a
        signed provenance for a run already recorded with the same content replaces an unsigned one.
        """
        result = validate_result(result)
        provenance = provenance or Provenance()
        cell = Cell.from_result(result)
        image = result.get("image") or {}
        content = canonical_json(result)
        outcome = "new"
        with self._write() as conn:
            existing = conn.execute(
                "SELECT id, result_json, provenance FROM runs WHERE run_id = ?", (result["run_id"],)
            ).fetchone()
            if existing and existing[1] == content:
                if provenance.kind != UNSIGNED and existing[2] == UNSIGNED:
                    conn.execute(
                        "UPDATE runs SET provenance = ?, signer = ?, attestation_json = ? WHERE id = ?",
                        (provenance.kind, provenance.signer, provenance.attestation, existing[0]),
                    )
                return RecordedRun(existing[0], result["run_id"], cell.key, outcome="identical")
            if existing and not replace:
                raise RunConflictError(
                    f"run {result['run_id']} is already recorded with other content; nothing was changed."
                    " Pass --replace to overwrite it with this one"
                )
            if existing:  # its probes go with it (ON DELETE CASCADE)
                conn.execute("DELETE FROM runs WHERE id = ?", (existing[0],))
                outcome = "replaced"
            cell_id = _ensure_cell(conn, cell)
            if build_id is None and image.get("digest"):
                row = conn.execute(
                    "SELECT id FROM builds WHERE image_digest = ? AND cell_id = ? ORDER BY id DESC LIMIT 1",
                    (image["digest"], cell_id),
                ).fetchone()
                build_id = row[0] if row else None
            elif build_id is not None:
                row = conn.execute(
                    "SELECT cells.id, cells.key FROM builds JOIN cells ON cells.id = builds.cell_id"
                    " WHERE builds.id = ?",
                    (build_id,),
                ).fetchone()
                if row is None or row[0] != cell_id:
                    raise InvalidResultError(
                        f"run {result['run_id']} is of cell {cell.key}, but build {build_id} is of cell"
                        f" {row[1] if row else '(none)'}; nothing was recorded"
                    )
            manifest = image.get("manifest") if isinstance(image.get("manifest"), dict) else {}
            metrics = result.get("metrics") or {}  # typed by the schema: numbers or null
            base_digest = conn.execute("SELECT base_digest FROM builds WHERE id = ?", (build_id,)).fetchone()
            cur = conn.execute(
                "INSERT INTO runs (run_id, cell_id, build_id, command, status, error_class, error, started_at,"
                " finished_at, wall_time_s, image_tag, image_digest, host_json, result_json, source, recorded_at,"
                " counts, attempt_dir, base_image, base_digest, context_hash, provenance, signer, attestation_json,"
                " preset, samples_per_s, mfu, schema_checked)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                (
                    result["run_id"],
                    cell_id,
                    build_id,
                    result["command"],
                    result["status"],
                    result.get("error_class"),
                    result.get("error"),
                    result.get("started_at"),
                    result.get("finished_at"),
                    result.get("wall_time_s"),
                    image.get("tag"),
                    image.get("digest"),
                    json.dumps(result["host"], sort_keys=True) if result.get("host") is not None else None,
                    content,
                    source,
                    utc_now(),
                    int(verdict_rules.counts("run", result["status"], result.get("error_class"))),
                    str(attempt_dir) if attempt_dir is not None else None,
                    _str_or_none(manifest.get("base_image")),
                    base_digest[0] if base_digest else None,
                    _str_or_none(manifest.get("context_hash")),
                    provenance.kind,
                    provenance.signer,
                    provenance.attestation,
                    (result.get("config") or {}).get("preset"),
                    metrics.get("samples_per_s"),
                    metrics.get("mfu"),
                ),
            )
            row_id = cur.lastrowid
            conn.executemany(
                "INSERT OR REPLACE INTO probes (run_row, name, status, message, values_json) VALUES (?, ?, ?, ?, ?)",
                [
                    (row_id, p["name"], p["status"], p.get("message") or "", json.dumps(p.get("values") or {}))
                    for p in result.get("probes") or []
                ],
            )
            return RecordedRun(row_id, result["run_id"], cell.key, outcome=outcome)

    def merge_from(self, other: str | os.PathLike, *, replace: bool = False) -> tuple[int, dict[str, int]]:
        """Copy the builds and runs of another matrix file (e.g. a CI job's) into this one, idempotently.

        Returns (builds added, {"new"|"identical"|"replaced": runs}); rows already here (same build_uid /
        identical run) are skipped. Every row is checked first (`read_mergeable`): one invalid row merges
        nothing. Attempt folders are copied under this file's own attempt root (`attempt_files.adopt_attempt`);
        paths the rows name (`log_path`, `source`) are kept as notes and never opened. Each row is its own
        transaction: an interrupted merge is completed by running it again. The other file is only read. Its
        runs come in unsigned: another file's provenance is a claim this one cannot check (an attestation
        covers a result.json's bytes, which a matrix file does not keep); importing the signed result.json
        files upgrades them.
        """
        builds, runs = type(self).read_mergeable(other)
        added_builds = 0
        outcomes = {"new": 0, "identical": 0, "replaced": 0}
        id_map: dict[int, int] = {}  # source build id -> build id here
        for source_id, cell, build in builds:
            before = self._conn.execute("SELECT 1 FROM builds WHERE build_uid = ?", (build["build_uid"],)).fetchone()
            source_attempt = build.pop("attempt_dir")
            attempt = (
                attempt_files.adopt_attempt(Path(other), source_attempt, self.path, build["build_uid"])
                if before is None
                else None
            )
            id_map[source_id] = self.record_build(cell, **build, attempt_dir=attempt)
            added_builds += before is None
        for row in runs:
            new = self.classify_run(row["result"]) != "identical"
            attempt = (
                attempt_files.adopt_attempt(Path(other), row["attempt_dir"], self.path, row["result"]["run_id"])
                if new
                else None
            )
            recorded = self.record_run(
                row["result"],
                build_id=id_map.get(row["build_id"]),
                source=row["source"],
                replace=replace,
                attempt_dir=attempt,
            )
            outcomes[recorded.outcome] += 1
        return added_builds, outcomes

    def scratch_copy(self, target: str | os.PathLike):
        """A whole copy of this matrix in the new file `target` (SQLite's online backup), open for writing: a
        throwaway file, so it is written without syncing to disk, and not checked again (this one was)."""
        copy = sqlite3.connect(target, isolation_level=None)
        try:
            copy.execute("PRAGMA synchronous = OFF")
            self._conn.backup(copy)
            copy.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            copy.close()
            raise
        return type(self)(copy, Path(target))

    def copy_published(
        self, target: str | os.PathLike, provenance_now: dict | None = None, build_provenance_now: dict | None = None
    ) -> None:
        """Write a copy of this matrix to the new file `target` without its unsigned runs (what a published report
        reads), nor those `provenance_now` (row id -> Provenance derived now) no longer publishes. Builds are kept,
        each with the provenance `build_provenance_now` (build row id -> Provenance) derives for it now."""
        copy = sqlite3.connect(target)
        try:
            copy.execute("PRAGMA synchronous = OFF")  # a throwaway file
            self._conn.backup(copy)
            copy.executemany(
                "UPDATE runs SET provenance = ?, signer = ? WHERE id = ?",
                [(p.kind, p.signer, row_id) for row_id, p in (provenance_now or {}).items()],
            )
            copy.executemany(
                "UPDATE builds SET provenance = ?, signer = ? WHERE id = ?",
                [(p.kind, p.signer, row_id) for row_id, p in (build_provenance_now or {}).items()],
            )
            marks = ", ".join("?" for _ in PUBLISHED)
            copy.execute(
                f"DELETE FROM probes WHERE run_row IN (SELECT id FROM runs WHERE provenance NOT IN ({marks}))",
                PUBLISHED,
            )
            copy.execute(f"DELETE FROM runs WHERE provenance NOT IN ({marks})", PUBLISHED)
            copy.execute(
                "DELETE FROM cells WHERE id NOT IN (SELECT cell_id FROM runs UNION SELECT cell_id FROM builds)"
            )
            copy.commit()
        finally:
            copy.close()


def _ensure_cell(conn: sqlite3.Connection, cell: Cell) -> int:
    """The row of `cell`, inserted if new. A row with its key but other coordinates (written by an older
    envbuild, whose keys could collide) is never joined: InvalidResultError."""
    coords = (cell.flavor, cell.accel_version, cell.torch, cell.arch, cell.python)
    row = conn.execute(
        "SELECT id, flavor, accel_version, torch, arch, python FROM cells WHERE key = ?", (cell.key,)
    ).fetchone()
    if row is None:
        try:
            return conn.execute(
                "INSERT INTO cells (key, flavor, accel_version, torch, arch, python) VALUES (?, ?, ?, ?, ?, ?)",
                (cell.key, *coords),
            ).lastrowid
        except sqlite3.IntegrityError:
            raise InvalidResultError(
                f"cell {cell.key}: its coordinates are stored under another key; `envbuild matrix check` lists the row"
            ) from None
    if tuple(row[1:]) != coords:
        raise InvalidResultError(
            f"cell key {cell.key} in the matrix names other coordinates ({', '.join(map(str, row[1:]))});"
            " the run was not recorded. `envbuild matrix check` lists that row"
        )
    return row[0]


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
