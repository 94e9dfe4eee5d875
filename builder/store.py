"""The compatibility matrix on disk: one SQLite file with a versioned schema and transactional writes.

Open it with `MatrixStore.open(path)` (a context manager). Opening checks the file before anything
is written: a file that is not SQLite, fails `PRAGMA integrity_check`, or carries a schema newer than
this envbuild knows raises `StoreError` and leaves the file's bytes as they were. Every write runs in
one `BEGIN IMMEDIATE` transaction, so concurrent writers (two runs finishing at once) queue on the
busy timeout instead of losing rows; WAL mode lets readers go on meanwhile.
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from builder.cells import Cell

#: Environment variable naming the matrix database (the `--db` option reads it too).
DB_ENV_VAR = "ENVBUILD_DB"
DEFAULT_DB_NAME = "envbuild-matrix.db"
#: The result.json schema versions this store can import (docs/result-schema.md).
RESULT_SCHEMA_VERSIONS = (1,)
RUN_STATUSES = ("pass", "fail", "error")
BUILD_STATUSES = ("pass", "fail")
BUSY_TIMEOUT_MS = 60_000
_SQLITE_MAGIC = b"SQLite format 3\x00"

# Migration N takes the schema from version N-1 to N. Append new ones; never edit a published one.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE cells (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        flavor TEXT NOT NULL,
        accel_version TEXT,
        torch TEXT NOT NULL,
        arch TEXT,
        python TEXT NOT NULL
    );
    CREATE TABLE builds (
        id INTEGER PRIMARY KEY,
        build_uid TEXT NOT NULL UNIQUE,
        cell_id INTEGER NOT NULL REFERENCES cells(id),
        recipe_hash TEXT,
        context_hash TEXT,
        image_tag TEXT,
        image_digest TEXT,
        duration_s REAL,
        log_path TEXT,
        status TEXT NOT NULL CHECK (status IN ('pass', 'fail')),
        failure_class TEXT,
        error TEXT,
        manifest_json TEXT,
        created_at TEXT NOT NULL
    );
    CREATE INDEX builds_cell ON builds(cell_id, created_at);
    CREATE INDEX builds_digest ON builds(image_digest);
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL UNIQUE,
        cell_id INTEGER NOT NULL REFERENCES cells(id),
        build_id INTEGER REFERENCES builds(id),
        command TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('pass', 'fail', 'error')),
        error_class TEXT,
        error TEXT,
        started_at TEXT,
        finished_at TEXT,
        wall_time_s REAL,
        image_tag TEXT,
        image_digest TEXT,
        host_json TEXT,
        result_json TEXT NOT NULL,
        source TEXT,
        recorded_at TEXT NOT NULL
    );
    CREATE INDEX runs_cell ON runs(cell_id, finished_at);
    CREATE TABLE probes (
        run_row INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        status TEXT NOT NULL,
        message TEXT,
        values_json TEXT,
        PRIMARY KEY (run_row, name)
    );
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


class StoreError(Exception):
    """The matrix database cannot be used as asked; the message says why and what to do."""


class InvalidResultError(StoreError, ValueError):
    """A result.json that does not follow docs/result-schema.md."""


def default_db_path() -> Path:
    """`$ENVBUILD_DB` if set, else `./envbuild-matrix.db` in the current directory."""
    return Path(os.environ.get(DB_ENV_VAR) or DEFAULT_DB_NAME)


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class RecordedRun:
    """What `record_run` did: the run's row id and whether this call inserted it (False: already there)."""

    row_id: int
    run_id: str
    cell_key: str
    inserted: bool


class MatrixStore:
    """A connection to one matrix database file. Use `MatrixStore.open(path)`."""

    def __init__(self, conn: sqlite3.Connection, path: Path):
        self._conn = conn
        self.path = path

    # ---- opening ---------------------------------------------------------------------------
    @classmethod
    @contextmanager
    def open(cls, path: str | os.PathLike | None = None) -> Iterator["MatrixStore"]:
        """Open (creating and migrating if needed) the database at `path` (default: `default_db_path()`)."""
        store = cls.connect(path)
        try:
            yield store
        finally:
            store.close()

    @classmethod
    def connect(cls, path: str | os.PathLike | None = None) -> "MatrixStore":
        """Like `open`, without the context manager: call `close()` yourself."""
        db = Path(path) if path is not None else default_db_path()
        _check_header(db)
        if not db.parent.exists():
            db.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(db, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open matrix database {db}: {exc}") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            _check_readable(conn, db)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA foreign_keys = ON")
            _migrate(conn, db)
        except BaseException:
            conn.close()
            raise
        return cls(conn, db)

    def close(self) -> None:
        self._conn.close()

    @property
    def schema_version(self) -> int:
        return self._conn.execute("PRAGMA user_version").fetchone()[0]

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: all of it lands, or none of it."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    # ---- writes ----------------------------------------------------------------------------
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
    ) -> int:
        """Record one image build of `cell` ("pass" or "fail" with a `failure_class`); returns its id.

        `build_uid` (default: a new uuid4 hex) identifies the build across databases: recording the
        same uid again inserts nothing and returns the existing id (what merging CI databases relies on).
        """
        if status not in BUILD_STATUSES:
            raise StoreError(f"build status must be one of {BUILD_STATUSES}, got {status!r}")
        if status == "fail" and not failure_class:
            raise StoreError("a failed build needs a failure_class (e.g. 'network', 'compile', 'oom')")
        build_uid = build_uid or uuid.uuid4().hex
        with self._write() as conn:
            existing = conn.execute("SELECT id FROM builds WHERE build_uid = ?", (build_uid,)).fetchone()
            if existing:
                return existing[0]
            cell_id = _ensure_cell(conn, cell)
            cur = conn.execute(
                "INSERT INTO builds (build_uid, cell_id, recipe_hash, context_hash, image_tag, image_digest,"
                " duration_s, log_path, status, failure_class, error, manifest_json, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (build_uid, cell_id, recipe_hash, context_hash, image_tag, image_digest, duration_s,
                 str(log_path) if log_path is not None else None, status, failure_class, error,
                 json.dumps(manifest, sort_keys=True) if manifest is not None else None,
                 created_at or utc_now()),
            )
            return cur.lastrowid

    def record_run(self, result: dict, *, build_id: int | None = None, source: str | None = None) -> RecordedRun:
        """Record a result.json (as a dict). Idempotent on `result["run_id"]`: a second call inserts nothing.

        Without `build_id`, the run is linked to the latest build whose image digest matches
        `result["image"]["digest"]`, if there is one. `source` notes where it came from (a file path).
        """
        validate_result(result)
        cell = Cell.from_result(result)
        image = result.get("image") or {}
        with self._write() as conn:
            existing = conn.execute("SELECT id FROM runs WHERE run_id = ?", (result["run_id"],)).fetchone()
            if existing:
                return RecordedRun(existing[0], result["run_id"], cell.key, inserted=False)
            cell_id = _ensure_cell(conn, cell)
            if build_id is None and image.get("digest"):
                row = conn.execute(
                    "SELECT id FROM builds WHERE image_digest = ? ORDER BY id DESC LIMIT 1", (image["digest"],)
                ).fetchone()
                build_id = row[0] if row else None
            cur = conn.execute(
                "INSERT INTO runs (run_id, cell_id, build_id, command, status, error_class, error, started_at,"
                " finished_at, wall_time_s, image_tag, image_digest, host_json, result_json, source, recorded_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (result["run_id"], cell_id, build_id, result["command"], result["status"],
                 result.get("error_class"), result.get("error"), result.get("started_at"),
                 result.get("finished_at"), result.get("wall_time_s"), image.get("tag"), image.get("digest"),
                 json.dumps(result["host"], sort_keys=True) if result.get("host") is not None else None,
                 json.dumps(result, sort_keys=True), source, utc_now()),
            )
            row_id = cur.lastrowid
            conn.executemany(
                "INSERT OR REPLACE INTO probes (run_row, name, status, message, values_json) VALUES (?, ?, ?, ?, ?)",
                [(row_id, p["name"], p["status"], p.get("message") or "", json.dumps(p.get("values") or {}))
                 for p in result.get("probes") or []],
            )
            return RecordedRun(row_id, result["run_id"], cell.key, inserted=True)

    def merge_from(self, other: str | os.PathLike) -> tuple[int, int]:
        """Copy the builds and runs of another matrix file (e.g. a CI job's) into this one, idempotently.

        Returns (builds added, runs added); rows already here (same build_uid / run_id) are skipped.
        Each row is its own transaction: an interrupted merge is completed by running it again.
        """
        with MatrixStore.open(other) as source:
            builds, runs = source.builds(), source.runs()
        added_builds = added_runs = 0
        id_map: dict[int, int] = {}  # source build id -> build id here
        for build in builds:
            before = self._conn.execute("SELECT 1 FROM builds WHERE build_uid = ?", (build["build_uid"],)).fetchone()
            id_map[build["id"]] = self.record_build(
                Cell(**build["cell"]),
                **{k: build[k] for k in ("status", "recipe_hash", "context_hash", "image_tag", "image_digest",
                                         "duration_s", "log_path", "failure_class", "error", "manifest",
                                         "created_at", "build_uid")})
            added_builds += before is None
        for row in runs:
            recorded = self.record_run(row["result"], build_id=id_map.get(row["build_id"]), source=row["source"])
            added_runs += recorded.inserted
        return added_builds, added_runs

    # ---- reads -----------------------------------------------------------------------------
    def cells(self) -> list[Cell]:
        """Every cell that has a build or a run recorded, ordered by key."""
        rows = self._conn.execute(
            "SELECT flavor, accel_version, torch, arch, python FROM cells ORDER BY key").fetchall()
        return [Cell(flavor=r[0], accel_version=r[1], torch=r[2], arch=r[3], python=r[4]) for r in rows]

    def runs(self, cell_key: str | None = None) -> list[dict]:
        """Recorded runs (oldest first), each the stored result.json plus `cell_key`, `row_id`, `build_id`."""
        sql = ("SELECT runs.id, cells.key, runs.build_id, runs.result_json, runs.source, runs.recorded_at"
               " FROM runs JOIN cells ON cells.id = runs.cell_id")
        args: tuple = ()
        if cell_key is not None:
            sql += " WHERE cells.key = ?"
            args = (cell_key,)
        sql += " ORDER BY COALESCE(runs.finished_at, runs.recorded_at), runs.id"
        out = []
        for row_id, key, build_id, result_json, source, recorded_at in self._conn.execute(sql, args):
            out.append({"row_id": row_id, "cell_key": key, "build_id": build_id, "source": source,
                        "recorded_at": recorded_at, "result": json.loads(result_json)})
        return out

    def builds(self, cell_key: str | None = None) -> list[dict]:
        """Recorded builds (oldest first) as dicts of their columns plus `cell_key` and `cell` (coordinates)."""
        sql = ("SELECT builds.*, cells.key AS cell_key, cells.flavor AS cell_flavor,"
               " cells.accel_version AS cell_accel_version, cells.torch AS cell_torch, cells.arch AS cell_arch,"
               " cells.python AS cell_python FROM builds JOIN cells ON cells.id = builds.cell_id")
        args: tuple = ()
        if cell_key is not None:
            sql += " WHERE cells.key = ?"
            args = (cell_key,)
        cur = self._conn.execute(sql + " ORDER BY builds.created_at, builds.id", args)
        names = [d[0] for d in cur.description]
        out = []
        for row in cur:
            build = dict(zip(names, row))
            manifest = build.pop("manifest_json")
            build["manifest"] = json.loads(manifest) if manifest else None
            build["cell"] = {name: build.pop(f"cell_{name}") for name in ("flavor", "accel_version", "torch", "arch", "python")}
            out.append(build)
        return out

    def probe_rows(self, run_row: int) -> list[dict]:
        cur = self._conn.execute(
            "SELECT name, status, message, values_json FROM probes WHERE run_row = ? ORDER BY name", (run_row,))
        return [{"name": n, "status": s, "message": m, "values": json.loads(v or "{}")} for n, s, m, v in cur]

    def integrity_ok(self) -> bool:
        return self._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def validate_result(result: Any) -> None:
    """Raise InvalidResultError unless `result` has what the matrix needs from docs/result-schema.md."""
    if not isinstance(result, dict):
        raise InvalidResultError("a result must be a JSON object (docs/result-schema.md)")
    version = result.get("schema_version")
    if version not in RESULT_SCHEMA_VERSIONS:
        raise InvalidResultError(
            f"result schema_version {version!r} is not one this envbuild reads {RESULT_SCHEMA_VERSIONS};"
            " upgrade envbuild or re-run the workload with a matching version")
    missing = [k for k in ("run_id", "command", "status", "versions") if not result.get(k)]
    if missing:
        raise InvalidResultError(f"result is missing {', '.join(missing)} (docs/result-schema.md)")
    if result["status"] not in RUN_STATUSES:
        raise InvalidResultError(f"result status must be one of {RUN_STATUSES}, got {result['status']!r}")
    if result["status"] != "pass" and not result.get("error_class"):
        raise InvalidResultError("a result that did not pass needs an error_class (docs/result-schema.md)")
    for key in ("python", "torch"):
        if not (result["versions"] or {}).get(key):
            raise InvalidResultError(f"result versions.{key} is missing: the matrix cell cannot be known")
    for probe in result.get("probes") or []:
        if not isinstance(probe, dict) or not probe.get("name") or probe.get("status") not in ("pass", "fail", "skip"):
            raise InvalidResultError(f"probe entry {probe!r} needs a name and a status pass|fail|skip")


def _ensure_cell(conn: sqlite3.Connection, cell: Cell) -> int:
    conn.execute(
        "INSERT INTO cells (key, flavor, accel_version, torch, arch, python) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(key) DO NOTHING",
        (cell.key, cell.flavor, cell.accel_version, cell.torch, cell.arch, cell.python),
    )
    return conn.execute("SELECT id FROM cells WHERE key = ?", (cell.key,)).fetchone()[0]


def _check_header(db: Path) -> None:
    """Refuse, before SQLite touches it, a non-empty file that is not an SQLite database."""
    if db.is_dir():
        raise StoreError(f"matrix database {db} is a directory; pass a file path with --db or ${DB_ENV_VAR}")
    if not db.exists() or db.stat().st_size == 0:
        return
    with db.open("rb") as fh:
        head = fh.read(len(_SQLITE_MAGIC))
    if head != _SQLITE_MAGIC:
        raise StoreError(
            f"{db} is not an SQLite database (corrupt or another file); nothing was changed."
            f" Restore it from a backup, or point --db / ${DB_ENV_VAR} at a new path")


def _check_readable(conn: sqlite3.Connection, db: Path) -> None:
    """Schema version and integrity, read-only: raise StoreError without writing anything."""
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{db} has matrix schema version {version}, newer than this envbuild knows ({SCHEMA_VERSION});"
                " nothing was changed. Upgrade envbuild, or use another --db path")
        problems = [row[0] for row in conn.execute("PRAGMA integrity_check")]
    except sqlite3.DatabaseError as exc:
        raise StoreError(
            f"{db} is corrupt ({exc}); nothing was changed. Restore it from a backup,"
            f" or point --db / ${DB_ENV_VAR} at a new path") from exc
    if problems != ["ok"]:
        raise StoreError(
            f"{db} failed its integrity check ({'; '.join(problems[:3])}); nothing was changed."
            f" Restore it from a backup, or point --db / ${DB_ENV_VAR} at a new path")


def _migrate(conn: sqlite3.Connection, db: Path) -> None:
    """Apply the migrations the file lacks, each in its own transaction (concurrent openers serialise)."""
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version >= SCHEMA_VERSION:
                conn.execute("COMMIT")
                return
            for statement in _statements(MIGRATIONS[version]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def _statements(script: str) -> list[str]:
    """The statements of a migration (executescript would commit mid-transaction)."""
    return [s.strip() for s in script.split(";") if s.strip()]
