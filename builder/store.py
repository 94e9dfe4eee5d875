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
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from pydantic import ValidationError

from builder import attempt_files, result_schema, verdict_rules
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
    # 2: attempts vs verdicts (builder/verdict_rules.py), each attempt's own directory, the environment
    # (base image and digest, content hash). The class lists are those of this version, frozen here.
    """
    ALTER TABLE builds ADD COLUMN counts INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE builds ADD COLUMN attempt_dir TEXT;
    ALTER TABLE builds ADD COLUMN base_image TEXT;
    ALTER TABLE builds ADD COLUMN base_digest TEXT;
    ALTER TABLE runs ADD COLUMN counts INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE runs ADD COLUMN attempt_dir TEXT;
    ALTER TABLE runs ADD COLUMN base_image TEXT;
    ALTER TABLE runs ADD COLUMN base_digest TEXT;
    ALTER TABLE runs ADD COLUMN context_hash TEXT;
    UPDATE builds SET base_image = json_extract(manifest_json, '$.base_image')
        WHERE json_valid(manifest_json) AND json_type(manifest_json, '$.base_image') = 'text';
    UPDATE runs SET base_image = json_extract(result_json, '$.image.manifest.base_image'),
        context_hash = json_extract(result_json, '$.image.manifest.context_hash')
        WHERE json_valid(result_json) AND json_type(result_json, '$.image.manifest') = 'object';
    UPDATE builds SET counts = 0 WHERE status = 'fail' AND failure_class IN
        ('base_image_unavailable', 'build_context_error', 'interrupted', 'usage_error');
    UPDATE runs SET counts = 0 WHERE status != 'pass' AND error_class IN
        ('interrupted', 'data_error', 'model_error', 'usage_error', 'input_error', 'container_error')
    """,
    # 3: a cell is its coordinates: no two rows may hold the same ones under different keys (issue 20).
    """
    CREATE UNIQUE INDEX cells_coordinates ON cells (flavor, COALESCE(accel_version, ''), torch,
        COALESCE(arch, ''), python)
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


class StoreError(Exception):
    """The matrix database cannot be used as asked; the message says why and what to do."""


class InvalidResultError(StoreError, ValueError):
    """A result.json that does not follow docs/result-schema.md."""


class RunConflictError(StoreError):
    """A run_id already recorded with other content (refused unless replace=True)."""


@dataclass(frozen=True)
class DamagedRow:
    """A stored row whose JSON does not parse: reads skip it, `envbuild matrix check` lists it."""

    table: str
    row_id: int
    ident: str  # run_id / build_uid / probe name
    column: str
    problem: str

    def __str__(self) -> str:
        return f"{self.table} row {self.row_id} ({self.ident}): {self.column} unreadable ({self.problem})"


def default_db_path() -> Path:
    """`$ENVBUILD_DB` if set, else `./envbuild-matrix.db` in the current directory."""
    return Path(os.environ.get(DB_ENV_VAR) or DEFAULT_DB_NAME)


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


class MatrixStore:
    """A connection to one matrix database file. Use `MatrixStore.open(path)`."""

    def __init__(self, conn: sqlite3.Connection, path: Path):
        self._conn = conn
        self.path = path
        self.damaged: list[DamagedRow] = []  # rows the reads so far skipped
        self.bad_text = 0  # text values read that were not UTF-8 (shown with U+FFFD; `check` names their rows)

    def _rows(self, sql: str, args=()) -> list[tuple]:
        """A read's rows. SQLite's own UTF-8 decoding is fast but stops at a damaged value: the query is then
        run again decoding in Python, where such a value becomes U+FFFD (counted in `bad_text`)."""
        try:
            return self._conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            if "decode" not in str(exc):
                raise
        self._conn.text_factory = self._text
        try:
            return self._conn.execute(sql, args).fetchall()
        finally:
            self._conn.text_factory = str

    def _text(self, raw: bytes) -> str:
        """A TEXT value: bytes that are not UTF-8 (damage that passes the integrity check) never stop a read."""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.bad_text += 1
            return raw.decode("utf-8", "replace")

    # ---- opening ---------------------------------------------------------------------------
    @classmethod
    @contextmanager
    def open(cls, path: str | os.PathLike | None = None, *, readonly: bool = False) -> Iterator["MatrixStore"]:
        """Open (creating and migrating if needed) the database at `path` (default: `default_db_path()`).

        `readonly`: the file must exist and hold a current matrix; nothing is created, migrated or grown.
        """
        store = cls.connect(path, readonly=readonly)
        try:
            yield store
        finally:
            store.close()

    @classmethod
    def connect(cls, path: str | os.PathLike | None = None, *, readonly: bool = False) -> "MatrixStore":
        """Like `open`, without the context manager: call `close()` yourself."""
        db = Path(path) if path is not None else default_db_path()
        _check_header(db)
        if readonly:
            return cls(_connect_readonly(db), db)
        if not db.parent.exists():
            db.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(db, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open matrix database {db}: {exc}") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            _check_readable(conn, db)
            _wal(conn)
            conn.execute("PRAGMA foreign_keys = ON")
            _migrate(conn, db)
        except BaseException:
            conn.close()
            raise
        return cls(conn, db)

    def close(self) -> None:
        self._conn.close()

    @classmethod
    def preflight(cls, path: str | os.PathLike | None = None) -> Path:
        """Check, before long work that records into it, that `path` can be opened; creates nothing.

        An existing file is opened read-only (header, integrity, schema); a new one needs a folder
        that exists or can be made. Returns the path; raises StoreError.
        """
        db = Path(path) if path is not None else default_db_path()
        _check_header(db)
        if db.exists() and db.stat().st_size:
            conn = _connect_readonly(db, require_current=False)
            conn.close()
            return db
        folder = next((p for p in (db.parent, *db.parent.parents) if p.exists()), Path("."))
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise StoreError(f"cannot create matrix database {db}: {folder} is not a writable folder;"
                             f" point --db / ${DB_ENV_VAR} elsewhere")
        return db

    @classmethod
    def peek(cls, path: str | os.PathLike) -> "MatrixStore | None":
        """Read-only, for the checks an import makes before it writes: an older schema is fine (the import
        upgrades it); a file that another importer is creating this instant (no tables yet) gives None."""
        db = Path(path)
        _check_header(db)
        conn = _connect_readonly(db, require_current=False, allow_new=True)
        return None if conn is None else cls(conn, db)

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
        attempt_dir: str | os.PathLike | None = None,
        base_image: str | None = None,
        base_digest: str | None = None,
    ) -> int:
        """Record one image build of `cell` ("pass" or "fail" with a `failure_class`); returns its id.

        `build_uid` (default: a new uuid4 hex) identifies the build across databases: recording the
        same uid again inserts nothing and returns the existing id (what merging CI databases relies on).
        Whether it is a verdict or only an attempt follows `verdict_rules.counts` (a failure on the input,
        e.g. `base_image_unavailable`, or `interrupted`, is an attempt). `base_image` defaults to the
        manifest's; `attempt_dir` is the build's own record (docs/matrix.md "Attempts").
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
                " duration_s, log_path, status, failure_class, error, manifest_json, created_at, counts,"
                " attempt_dir, base_image, base_digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (build_uid, cell_id, recipe_hash, context_hash, image_tag, image_digest, duration_s,
                 str(log_path) if log_path is not None else None, status, failure_class, error,
                 json.dumps(manifest, sort_keys=True) if manifest is not None else None,
                 created_at or utc_now(), int(verdict_rules.counts("build", status, failure_class)),
                 str(attempt_dir) if attempt_dir is not None else None,
                 base_image or (manifest or {}).get("base_image"), base_digest),
            )
            return cur.lastrowid

    def classify_run(self, result: dict) -> str:
        """"new", "identical" (same run_id, same content) or "conflict" (same run_id, other content)."""
        row = self._conn.execute("SELECT result_json FROM runs WHERE run_id = ?", (result["run_id"],)).fetchone()
        if row is None:
            return "new"
        return "identical" if row[0] == canonical_json(validate_result(result)) else "conflict"

    def record_run(self, result: dict, *, build_id: int | None = None, source: str | None = None,
                   replace: bool = False, attempt_dir: str | os.PathLike | None = None) -> RecordedRun:
        """Record a result.json (as a dict). Idempotent on `result["run_id"]`: the same content again writes nothing.

        The same run_id with other content raises RunConflictError, unless `replace` (the new content
        wins). Without `build_id`, the run is linked to the latest build whose image digest matches
        `result["image"]["digest"]`, if there is one. `source` notes where it came from (a file path).
        Verdict or attempt: `verdict_rules.counts`; the environment: the image manifest's base image and
        content hash, the linked build's base digest.
        """
        result = validate_result(result)
        cell = Cell.from_result(result)
        image = result.get("image") or {}
        content = canonical_json(result)
        outcome = "new"
        with self._write() as conn:
            existing = conn.execute("SELECT id, result_json FROM runs WHERE run_id = ?", (result["run_id"],)).fetchone()
            if existing and existing[1] == content:
                return RecordedRun(existing[0], result["run_id"], cell.key, outcome="identical")
            if existing and not replace:
                raise RunConflictError(
                    f"run {result['run_id']} is already recorded with other content; nothing was changed."
                    " Pass --replace to overwrite it with this one")
            if existing:
                conn.execute("DELETE FROM probes WHERE run_row = ?", (existing[0],))
                conn.execute("DELETE FROM runs WHERE id = ?", (existing[0],))
                outcome = "replaced"
            cell_id = _ensure_cell(conn, cell)
            if build_id is None and image.get("digest"):
                row = conn.execute(
                    "SELECT id FROM builds WHERE image_digest = ? AND cell_id = ? ORDER BY id DESC LIMIT 1",
                    (image["digest"], cell_id)).fetchone()
                build_id = row[0] if row else None
            elif build_id is not None:
                row = conn.execute("SELECT cells.id, cells.key FROM builds JOIN cells ON cells.id = builds.cell_id"
                                   " WHERE builds.id = ?", (build_id,)).fetchone()
                if row is None or row[0] != cell_id:
                    raise InvalidResultError(
                        f"run {result['run_id']} is of cell {cell.key}, but build {build_id} is of cell"
                        f" {row[1] if row else '(none)'}; nothing was recorded")
            manifest = image.get("manifest") if isinstance(image.get("manifest"), dict) else {}
            base_digest = conn.execute("SELECT base_digest FROM builds WHERE id = ?", (build_id,)).fetchone()
            cur = conn.execute(
                "INSERT INTO runs (run_id, cell_id, build_id, command, status, error_class, error, started_at,"
                " finished_at, wall_time_s, image_tag, image_digest, host_json, result_json, source, recorded_at,"
                " counts, attempt_dir, base_image, base_digest, context_hash)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (result["run_id"], cell_id, build_id, result["command"], result["status"],
                 result.get("error_class"), result.get("error"), result.get("started_at"),
                 result.get("finished_at"), result.get("wall_time_s"), image.get("tag"), image.get("digest"),
                 json.dumps(result["host"], sort_keys=True) if result.get("host") is not None else None,
                 content, source, utc_now(),
                 int(verdict_rules.counts("run", result["status"], result.get("error_class"))),
                 str(attempt_dir) if attempt_dir is not None else None, _text(manifest.get("base_image")),
                 base_digest[0] if base_digest else None, _text(manifest.get("context_hash"))),
            )
            row_id = cur.lastrowid
            conn.executemany(
                "INSERT OR REPLACE INTO probes (run_row, name, status, message, values_json) VALUES (?, ?, ?, ?, ?)",
                [(row_id, p["name"], p["status"], p.get("message") or "", json.dumps(p.get("values") or {}))
                 for p in result.get("probes") or []],
            )
            return RecordedRun(row_id, result["run_id"], cell.key, outcome=outcome)

    def merge_from(self, other: str | os.PathLike, *, replace: bool = False) -> tuple[int, dict[str, int]]:
        """Copy the builds and runs of another matrix file (e.g. a CI job's) into this one, idempotently.

        Returns (builds added, {"new"|"identical"|"replaced": runs}); rows already here (same build_uid /
        identical run) are skipped. Every row is checked first (`read_mergeable`): one invalid row merges
        nothing. Attempt folders are copied under this file's own attempt root (`attempt_files.adopt_attempt`);
        paths the rows name (`log_path`, `source`) are kept as notes and never opened. Each row is its own
        transaction: an interrupted merge is completed by running it again. The other file is only read.
        """
        builds, runs = read_mergeable(other)
        added_builds = 0
        outcomes = {"new": 0, "identical": 0, "replaced": 0}
        id_map: dict[int, int] = {}  # source build id -> build id here
        for source_id, cell, build in builds:
            before = self._conn.execute("SELECT 1 FROM builds WHERE build_uid = ?", (build["build_uid"],)).fetchone()
            source_attempt = build.pop("attempt_dir")
            attempt = attempt_files.adopt_attempt(Path(other), source_attempt, self.path) if before is None else None
            id_map[source_id] = self.record_build(cell, **build, attempt_dir=attempt)
            added_builds += before is None
        for row in runs:
            new = self.classify_run(row["result"]) != "identical"
            attempt = attempt_files.adopt_attempt(Path(other), row["attempt_dir"], self.path) if new else None
            recorded = self.record_run(row["result"], build_id=id_map.get(row["build_id"]), source=row["source"],
                                       replace=replace, attempt_dir=attempt)
            outcomes[recorded.outcome] += 1
        return added_builds, outcomes

    # ---- reads -----------------------------------------------------------------------------
    # Reads are tolerant: a row whose stored JSON does not parse (byte damage passes SQLite's
    # integrity check) is skipped and noted in `self.damaged`, so one bad row never hides the rest.
    def cells(self) -> list[Cell]:
        """Every cell that has a build or a run recorded, ordered by key (unreadable coordinates skipped)."""
        out = []
        for row_id, key, *coords in self._rows(
                "SELECT id, key, flavor, accel_version, torch, arch, python FROM cells ORDER BY key"):
            try:
                cell = Cell(**dict(zip(("flavor", "accel_version", "torch", "arch", "python"), coords)))
                if cell.key != key:
                    raise ValueError(f"the key does not name its coordinates ({cell.key})")
                out.append(cell)
            except ValueError as exc:
                self.damaged.append(DamagedRow("cells", row_id, key, "coordinates", _first_error(exc)))
        return out

    def runs(self, cell_key: str | None = None, *, last: int | None = None) -> list[dict]:
        """Recorded runs (oldest first): the stored result.json plus `cell_key`, `row_id`, `build_id`, `counts`.

        `last`: only the newest `last` runs of each cell (what a page shows; full history: `runs_json`).
        """
        sql = ("SELECT runs.id, runs.run_id, cells.key, runs.build_id, CAST(runs.result_json AS BLOB),"
               " runs.source, runs.recorded_at, runs.attempt_dir, runs.counts FROM runs JOIN cells ON cells.id = runs.cell_id"
               " WHERE 1")
        args: list = []
        if cell_key is not None:
            sql += " AND cells.key = ?"
            args.append(cell_key)
        if last is not None:
            sql += (" AND runs.id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY cell_id"
                    " ORDER BY COALESCE(finished_at, recorded_at) DESC, id DESC) AS n FROM runs) WHERE n <= ?)")
            args.append(last)
        sql += " ORDER BY COALESCE(runs.finished_at, runs.recorded_at), runs.id"
        out = []
        for row_id, run_id, key, build_id, blob, source, recorded_at, attempt_dir, counts in self._rows(sql, args):
            result = self._result(row_id, run_id, blob)
            if result is not None:
                out.append({"row_id": row_id, "cell_key": key, "build_id": build_id, "source": source,
                            "recorded_at": recorded_at, "attempt_dir": attempt_dir, "counts": bool(counts),
                            "result": result})
        return out

    def runs_json(self, cell_key: str, *, host_keys: tuple[str, ...] | None = None) -> list[str]:
        """A cell's stored result.json texts (oldest first, unparsed: fast at any size), damaged rows left out.

        `host_keys`: keep only these keys of each run's `host` block, plus `gpu_count` (None: all of it).
        """
        column = "runs.result_json"
        args: list = []
        if host_keys is not None:
            pairs = ", ".join(f"?, runs.result_json -> ?" for _ in host_keys)
            column = (f"CASE WHEN json_type(runs.result_json, '$.host') = 'object' THEN json_set(runs.result_json,"
                      f" '$.host', json_object({pairs}, 'gpu_count',"
                      " COALESCE(json_array_length(runs.result_json, '$.host.gpus'), 0))) ELSE runs.result_json END")
            for key in host_keys:
                args += [key, f"$.host.{key}"]
        cur = self._rows(
            f"SELECT json_valid(runs.result_json), runs.id, runs.run_id,"
            f" CASE WHEN json_valid(runs.result_json) THEN {column} END FROM runs JOIN cells ON cells.id = runs.cell_id"
            " WHERE cells.key = ? ORDER BY COALESCE(runs.finished_at, runs.recorded_at), runs.id",
            [*args, cell_key])
        out = []
        for valid, row_id, run_id, text in cur:
            if valid:
                out.append(text)
            else:
                self.damaged.append(DamagedRow("runs", row_id, str(run_id), "result_json", "not valid JSON"))
        return out

    def newest_per_preset(self) -> dict[str, list[dict]]:
        """cell key -> the newest readable run of each `config.preset`, newest first (only those are parsed)."""
        cur = self._rows(
            "SELECT runs.id, runs.run_id, cells.key, CAST(runs.result_json AS BLOB) FROM runs"
            " JOIN cells ON cells.id = runs.cell_id WHERE runs.id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER"
            " (PARTITION BY cell_id, json_extract(result_json, '$.config.preset') ORDER BY COALESCE(finished_at,"
            " recorded_at) DESC, id DESC) AS n FROM runs WHERE json_valid(result_json)) WHERE n = 1)"
            " ORDER BY cells.key, COALESCE(runs.finished_at, runs.recorded_at) DESC, runs.id DESC")
        out: dict[str, list[dict]] = {}
        for row_id, run_id, key, blob in cur:
            result = self._result(row_id, run_id, blob)
            if result is not None:
                out.setdefault(key, []).append(result)
        return out

    def train_metrics(self) -> list[dict]:
        """Every readable train run's cell_key, time (`at`), samples_per_s and mfu, oldest first (no parsing)."""
        cur = self._rows(
            "SELECT cells.key, COALESCE(runs.finished_at, runs.started_at, runs.recorded_at) AS at,"
            " json_extract(runs.result_json, '$.metrics.samples_per_s'), json_extract(runs.result_json, '$.metrics.mfu')"
            " FROM runs JOIN cells ON cells.id = runs.cell_id"
            " WHERE runs.command = 'train' AND json_valid(runs.result_json) ORDER BY at, runs.id")
        return [{"cell_key": k, "at": at, "samples_per_s": sps, "mfu": mfu} for k, at, sps, mfu in cur]

    def run_events(self, cell_key: str | None = None) -> list[dict]:
        """Every run as the few columns a verdict needs, oldest first: fast, the result.json is not read.

        Keys: cell_key, run_id, status, error_class, error, at, failed_probes (names, comma-separated),
        counts (a verdict, not only an attempt), base_image, base_digest, context_hash, attempt_dir.
        A row whose status column is damaged is skipped and noted.
        """
        cur = self._rows(
            "SELECT runs.id, cells.key, runs.run_id, runs.status, runs.error_class, runs.error,"
            " COALESCE(runs.finished_at, runs.started_at, runs.recorded_at) AS at,"
            " (SELECT group_concat(name, ', ') FROM probes WHERE run_row = runs.id AND status = 'fail'),"
            " runs.counts, runs.base_image, runs.base_digest, runs.context_hash, runs.attempt_dir"
            " FROM runs JOIN cells ON cells.id = runs.cell_id WHERE ? IS NULL OR cells.key = ? ORDER BY at, runs.id",
            (cell_key, cell_key))
        names = ("cell_key", "run_id", "status", "error_class", "error", "at", "failed_probes", "counts",
                 "base_image", "base_digest", "context_hash", "attempt_dir")
        events = []
        for row_id, *row in cur:
            event = dict(zip(names, row))
            if event["status"] in RUN_STATUSES and isinstance(event["at"], str):
                events.append(event)
            else:
                self.damaged.append(DamagedRow("runs", row_id, str(event["run_id"]), "status", "not a run status"))
        return events

    def builds(self, cell_key: str | None = None) -> list[dict]:
        """Recorded builds (oldest first) as dicts of their columns plus `cell_key` and `cell` (coordinates)."""
        sql = ("SELECT builds.*, CAST(builds.manifest_json AS BLOB) AS manifest_blob, cells.key AS cell_key,"
               " cells.flavor AS cell_flavor, cells.accel_version AS cell_accel_version, cells.torch AS cell_torch,"
               " cells.arch AS cell_arch, cells.python AS cell_python FROM builds JOIN cells ON cells.id = builds.cell_id")
        args: tuple = ()
        if cell_key is not None:
            sql += " WHERE cells.key = ?"
            args = (cell_key,)
        sql += " ORDER BY builds.created_at, builds.id"
        names = [d[0] for d in self._conn.execute(sql + " LIMIT 0", args).description]
        cur = self._rows(sql, args)
        out = []
        for row in cur:
            build = dict(zip(names, row))
            del build["manifest_json"]
            blob = build.pop("manifest_blob")
            build["manifest"] = None
            if blob is not None:
                build["manifest"] = self._json("builds", build["id"], build["build_uid"], "manifest_json", blob,
                                               lambda v: isinstance(v, dict))
                if build["manifest"] is None:
                    continue
            build["cell"] = {name: build.pop(f"cell_{name}") for name in ("flavor", "accel_version", "torch", "arch", "python")}
            out.append(build)
        return out

    def attempt_path(self, attempt_dir: str | None) -> str | None:
        """A stored attempt directory as a path: relative ones are relative to the matrix file's folder."""
        if not attempt_dir:
            return None
        return str((self.path.resolve().parent / attempt_dir))

    def probe_rows(self, run_row: int) -> list[dict]:
        cur = self._rows(
            "SELECT name, status, message, CAST(values_json AS BLOB) FROM probes WHERE run_row = ? ORDER BY name",
            (run_row,))
        out = []
        for name, status, message, blob in cur:
            values = self._json("probes", run_row, name, "values_json", blob or b"{}", lambda v: isinstance(v, dict))
            if values is not None:
                out.append({"name": name, "status": status, "message": message, "values": values})
        return out

    def check(self) -> list[DamagedRow]:
        """Every row whose stored JSON or cell coordinates do not parse (what the reads would skip)."""
        self.damaged = []
        self.cells()
        for row_id, run_id in self._conn.execute(  # in SQL: no result is parsed in Python (fast at any size)
                "SELECT id, run_id FROM runs WHERE NOT json_valid(result_json) OR json_type(result_json, '$.run_id')"
                " IS NOT 'text' OR json_type(result_json, '$.status') IS NOT 'text'"
                " OR json_type(result_json, '$.command') IS NOT 'text' ORDER BY id"):
            self.damaged.append(DamagedRow("runs", row_id, str(run_id), "result_json", "not a JSON result object"))
        self.builds()
        for row_id, name in self._conn.execute(
                "SELECT run_row, name FROM probes WHERE values_json IS NOT NULL AND (NOT json_valid(values_json)"
                " OR json_type(values_json) IS NOT 'object') ORDER BY run_row"):
            self.damaged.append(DamagedRow("probes", row_id, str(name), "values_json", "not a JSON object"))
        self._check_text()
        unique = {(d.table, d.row_id, d.column): d for d in reversed(self.damaged)}  # first finding per column
        return sorted(unique.values(), key=lambda d: (d.table != "cells", d.table, d.row_id, d.column))

    def _check_text(self) -> None:
        """Every TEXT value that is not UTF-8, as a DamagedRow (read as bytes, so nothing is replaced)."""
        idents = {"cells": "key", "builds": "build_uid", "runs": "run_id", "probes": "name"}
        for table, ident in idents.items():
            columns = [row[1] for row in self._conn.execute(f"PRAGMA table_info({table})")]
            row_key = "run_row" if table == "probes" else "id"
            cur = self._conn.execute(f"SELECT {row_key}, CAST({ident} AS BLOB), "
                                     + ", ".join(f"CAST({c} AS BLOB)" if c else c for c in columns)
                                     + f" FROM {table} WHERE " + " OR ".join(f"typeof({c}) = 'text'" for c in columns))
            for row_id, name, *values in cur:
                for column, value in zip(columns, values):
                    if isinstance(value, bytes):
                        try:
                            value.decode("utf-8")
                        except UnicodeDecodeError as exc:
                            self.damaged.append(DamagedRow(table, row_id, bytes(name or b"").decode("utf-8", "replace"),
                                                           column, f"not UTF-8 ({exc.reason} at byte {exc.start})"))

    def integrity_ok(self) -> bool:
        return self._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    def _result(self, row_id: int, run_id: str, blob: bytes) -> dict | None:
        """A stored result, parsed and checked by the result schema (rows an older envbuild stored unchecked
        included): None, and a DamagedRow noted, when it is not one."""
        result = self._json("runs", row_id, run_id, "result_json", blob, _is_result)
        if result is None:
            return None
        try:
            return result_schema.validate(result)
        except result_schema.ResultSchemaError as exc:
            self.damaged.append(DamagedRow("runs", row_id, str(run_id), "result_json",
                                           f"breaks the result schema: {exc.problems[0]}"))
            return None

    def _json(self, table: str, row_id: int, ident: str, column: str, blob: bytes, valid) -> Any:
        """The parsed JSON of one column, or None (and a DamagedRow noted) when it does not parse."""
        try:
            value = json.loads(bytes(blob).decode("utf-8"))
            if valid(value):
                return value
            problem = "not the expected JSON object"
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            problem = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
        self.damaged.append(DamagedRow(table, row_id, str(ident), column, problem))
        return None


_BUILD_COLUMNS = ("build_uid", "status", "failure_class", "error", "recipe_hash", "context_hash", "image_tag",
                  "image_digest", "base_image", "base_digest", "duration_s", "log_path", "attempt_dir", "manifest",
                  "created_at")


def read_mergeable(other: str | os.PathLike) -> tuple[list[tuple[int, Cell, dict]], list[dict]]:
    """Every build and run of another matrix file, each checked by the result schema; reads only.

    Returns ([(source build id, cell, build columns)], [run rows with `result` cleaned]). Raises
    StoreError for a file that cannot be read, InvalidResultError naming the first row that breaks the
    schema (a damaged row counts: merging a file should not lose rows silently).
    """
    with MatrixStore.open(other, readonly=True) as source:
        raw_builds, raw_runs = source.builds(), source.runs()
        if source.damaged:
            raise InvalidResultError(f"{other}: {source.damaged[0]}; `envbuild matrix check --db {other}` lists"
                                     " every such row")
    builds = []
    for build in raw_builds:
        try:
            cell = Cell(**build["cell"])
            if cell.key != build["cell_key"]:
                raise ValueError(f"cell key {build['cell_key']!r} does not name its coordinates ({cell.key})")
            clean = result_schema.validate_build({k: build[k] for k in _BUILD_COLUMNS})
        except (ValueError, TypeError) as exc:
            raise InvalidResultError(f"builds row {build['id']} ({_short(build.get('build_uid'))}):"
                                     f" {_first_error(exc)}") from None
        builds.append((build["id"], cell, clean))
    runs = []
    for row in raw_runs:
        try:
            result = validate_result(row["result"])
        except InvalidResultError as exc:
            raise InvalidResultError(f"runs row {row['row_id']} ({_short(row['result'].get('run_id'))}): {exc}") from None
        if Cell.from_result(result).key != row["cell_key"]:
            raise InvalidResultError(f"runs row {row['row_id']}: stored under cell {row['cell_key']}, but its"
                                     f" result names {Cell.from_result(result).key}")
        runs.append({**row, "result": result})
    return builds, runs


def canonical_json(result: dict) -> str:
    """How a result is stored and compared: sorted keys, default separators."""
    return json.dumps(result, sort_keys=True)


def _is_result(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(value.get(k), str) for k in ("run_id", "status", "command"))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return exc.errors()[0]["msg"].removeprefix("Value error, ")
    return str(exc)


def validate_result(result: Any) -> dict:
    """`result` as the matrix stores it (docs/result-schema.md; strings cleaned), or InvalidResultError.

    The message names the field path and the rule; the cell the result names is checked too.
    """
    if not isinstance(result, dict):
        raise InvalidResultError("a result must be a JSON object (docs/result-schema.md)")
    version = result.get("schema_version")
    if version not in RESULT_SCHEMA_VERSIONS:
        raise InvalidResultError(
            f"result schema_version {_short(version)} is not one this envbuild reads {RESULT_SCHEMA_VERSIONS};"
            " upgrade envbuild or re-run the workload with a matching version")
    missing = [k for k in ("run_id", "command", "status", "versions") if not result.get(k)]
    if missing:
        raise InvalidResultError(f"result is missing {', '.join(missing)} (docs/result-schema.md)")
    if not isinstance(result["status"], str) or result["status"] not in RUN_STATUSES:
        raise InvalidResultError(f"result status must be one of {RUN_STATUSES}, got {_short(result['status'])}")
    versions = result["versions"] if isinstance(result["versions"], dict) else {}
    for key in ("python", "torch"):
        if not versions.get(key):
            raise InvalidResultError(f"result versions.{key} is missing: the matrix cell cannot be known")
    try:
        clean = result_schema.validate(result)
    except result_schema.ResultSchemaError as exc:
        raise InvalidResultError(f"result does not follow docs/result-schema.md: {exc}") from None
    try:
        Cell.from_result(clean)
    except (ValueError, TypeError, AttributeError) as exc:
        raise InvalidResultError(f"result names no valid matrix cell: {_first_error(exc)}") from exc
    return clean


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "…"


def _ensure_cell(conn: sqlite3.Connection, cell: Cell) -> int:
    """The row of `cell`, inserted if new. A row with its key but other coordinates (written by an older
    envbuild, whose keys could collide) is never joined: InvalidResultError."""
    coords = (cell.flavor, cell.accel_version, cell.torch, cell.arch, cell.python)
    row = conn.execute("SELECT id, flavor, accel_version, torch, arch, python FROM cells WHERE key = ?",
                       (cell.key,)).fetchone()
    if row is None:
        try:
            return conn.execute("INSERT INTO cells (key, flavor, accel_version, torch, arch, python)"
                                " VALUES (?, ?, ?, ?, ?, ?)", (cell.key, *coords)).lastrowid
        except sqlite3.IntegrityError:
            raise InvalidResultError(f"cell {cell.key}: its coordinates are stored under another key;"
                                     " `envbuild matrix check` lists the row") from None
    if tuple(row[1:]) != coords:
        raise InvalidResultError(
            f"cell key {cell.key} in the matrix names other coordinates ({', '.join(map(str, row[1:]))});"
            " the run was not recorded. `envbuild matrix check` lists that row")
    return row[0]


def _wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL. Two processes opening a new file at once can get "database is locked" here at once
    (SQLite does not wait on the busy handler for a journal-mode change): retry until the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


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


def _connect_readonly(db: Path, *, require_current: bool = True, allow_new: bool = False) -> sqlite3.Connection | None:
    """A read-only connection to an existing, intact matrix file; StoreError otherwise (file untouched).

    `allow_new`: a file another process is creating right now (schema 0 and no tables yet) gives None.
    """
    if not db.exists():
        raise StoreError(
            f"no matrix database at {db}: record a run (`envbuild run workload`), import results"
            f" (`envbuild matrix import`), or point --db / ${DB_ENV_VAR} at an existing one")
    if db.stat().st_size == 0:
        raise StoreError(f"{db} is empty (0 bytes), not a matrix database; nothing was changed."
                         f" Remove it, or point --db / ${DB_ENV_VAR} at an existing matrix")
    try:
        conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open matrix database {db}: {exc}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        _check_readable(conn, db)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0 and allow_new and not conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            conn.close()
            return None
        if version == 0:
            raise StoreError(f"{db} is an SQLite file but not a matrix database; nothing was changed."
                             f" Point --db / ${DB_ENV_VAR} at a matrix")
        if require_current and version < SCHEMA_VERSION:
            raise StoreError(f"{db} has the older matrix schema {version} (this envbuild: {SCHEMA_VERSION});"
                             " `envbuild matrix import` into it once upgrades it")
    except BaseException:
        conn.close()
        raise
    return conn


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
