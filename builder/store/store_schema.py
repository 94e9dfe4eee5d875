"""The matrix file itself: its SQL schema and migrations, opening and checking the file (header, integrity,
schema version, WAL, busy timeout), the write transaction, and which result.json documents the store
accepts (`validate_result`, docs/result-schema.md). `builder.store.store.MatrixStore` is assembled from
`StoreConnection` (here), the writes (store_writes) and the reads (store_reads)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, TypeVar

from pydantic import ValidationError

from builder.interrupt import stop_exception
from builder.paths import DB_ENV_VAR, default_db_path
from builder.store import result_schema, verdict_rules
from builder.plan.cells import Cell

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
    # 2: attempts vs verdicts (builder/store/verdict_rules.py), each attempt's own directory, the environment
    # (base image and digest, content hash). The attempt classes are verdict_rules' own sets, the ones every
    # write uses: an upgraded file and a new one classify alike.
    f"""
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
        {verdict_rules.sql_list(verdict_rules.BUILD_ATTEMPT_CLASSES)};
    UPDATE runs SET counts = 0 WHERE status != 'pass' AND error_class IN
        {verdict_rules.sql_list(verdict_rules.RUN_ATTEMPT_CLASSES)}
    """,
    # 3: who measured each run (builder/store/provenance.py): 'ci', 'contributed' (a verified signed
    # attestation: its signer and envelope) or 'unsigned'. Runs recorded before had no attestation.
    """
    ALTER TABLE runs ADD COLUMN provenance TEXT NOT NULL DEFAULT 'unsigned';
    ALTER TABLE runs ADD COLUMN signer TEXT;
    ALTER TABLE runs ADD COLUMN attestation_json TEXT
    """,
    # 4: a cell is its coordinates: no two rows may hold the same ones under different keys; what the report
    # reads of every run (preset, samples/s, MFU) as columns, so no report parses every stored result; whether
    # the stored result passed the typed result schema on its way in (older rows are checked when read).
    """
    CREATE UNIQUE INDEX cells_coordinates ON cells (flavor, COALESCE(accel_version, ''), torch,
        COALESCE(arch, ''), python);
    ALTER TABLE runs ADD COLUMN preset TEXT;
    ALTER TABLE runs ADD COLUMN samples_per_s REAL;
    ALTER TABLE runs ADD COLUMN mfu REAL;
    ALTER TABLE runs ADD COLUMN schema_checked INTEGER NOT NULL DEFAULT 0;
    UPDATE runs SET
        preset = CASE WHEN json_type(result_json, '$.config.preset') = 'text'
                      THEN json_extract(result_json, '$.config.preset') END,
        samples_per_s = CASE WHEN json_type(result_json, '$.metrics.samples_per_s') IN ('real', 'integer')
                             THEN json_extract(result_json, '$.metrics.samples_per_s') END,
        mfu = CASE WHEN json_type(result_json, '$.metrics.mfu') IN ('real', 'integer')
                   THEN json_extract(result_json, '$.metrics.mfu') END
        WHERE json_valid(result_json)
    """,
    # 5: a build comes home: its typed build record (builder/store/build_record_schema.py) and who vouches for it,
    # as for runs ('ci', 'contributed' with its signer and DSSE envelope, or 'unsigned'). Builds recorded before
    # have no record.
    """
    ALTER TABLE builds ADD COLUMN provenance TEXT NOT NULL DEFAULT 'unsigned';
    ALTER TABLE builds ADD COLUMN signer TEXT;
    ALTER TABLE builds ADD COLUMN attestation_json TEXT;
    ALTER TABLE builds ADD COLUMN record_json TEXT
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


_Store = TypeVar("_Store", bound="StoreConnection")


class StoreConnection:
    """A connection to one matrix database file: opening, closing, the write transaction."""

    def __init__(self, conn: sqlite3.Connection, path: Path):
        self._conn = conn
        self.path = path
        self.damaged: list[DamagedRow] = []  # rows the reads so far skipped
        self.bad_text = 0  # text values read that were not UTF-8 (shown with U+FFFD; `check` names their rows)
        self.provenance_now: dict = {}  # row id -> Provenance derived now (provenance_now.current_provenance)
        self.build_provenance_now: dict = {}  # build row id -> Provenance derived now (the same, for builds)

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
    def open(cls: type[_Store], path: str | os.PathLike | None = None, *, readonly: bool = False) -> Iterator[_Store]:
        """Open (creating and migrating if needed) the database at `path` (default: `default_db_path()`).

        `readonly`: the file must exist and hold a current matrix; nothing is created, migrated or grown.
        """
        store = cls.connect(path, readonly=readonly)
        try:
            yield store
        finally:
            store.close()

    @classmethod
    def connect(
        cls: type[_Store], path: str | os.PathLike | None = None, *, readonly: bool = False, progress=None
    ) -> _Store:
        """Like `open`, without the context manager: call `close()` yourself. `progress` (read-only only): an
        SQLite progress handler set before the first query (ReadBudget)."""
        db = Path(path) if path is not None else default_db_path()
        _check_header(db)
        if readonly:
            return cls(_connect_readonly(db, progress=progress), db)
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

    def sibling(self: _Store) -> _Store:
        """Another read-only connection to this store's file, for a reader thread of the same command; not checked
        again (this one was when it opened). Close it yourself."""
        try:
            conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open matrix database {self.path}: {exc}") from exc
        return type(self)(conn, self.path)

    @classmethod
    def preflight(cls, path: str | os.PathLike | None = None) -> Path:
        """Check, before long work that records into it, that `path` can be opened; creates nothing.

        An existing file is opened read-only (header, integrity, schema; one that another process is
        creating this instant, no tables yet, is fine: opening it later migrates it); a new one needs a
        folder that exists or can be made. Returns the path; raises StoreError.
        """
        db = Path(path) if path is not None else default_db_path()
        _check_header(db)
        if db.exists() and db.stat().st_size:
            conn = _connect_readonly(db, require_current=False, allow_new=True)
            if conn is not None:
                conn.close()
            return db
        folder = next((p for p in (db.parent, *db.parent.parents) if p.exists()), Path("."))
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise StoreError(
                f"cannot create matrix database {db}: {folder} is not a writable folder;"
                f" point --db / ${DB_ENV_VAR} elsewhere"
            )
        return db

    @classmethod
    def peek(cls, path: str | os.PathLike) -> StoreConnection | None:  # cls: a MatrixStore
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


def canonical_json(result: dict) -> str:
    """How a result is stored and compared: sorted keys, default separators."""
    return json.dumps(result, sort_keys=True)


def _is_result(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(value.get(k), str) for k in ("run_id", "status", "command"))


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
        raise InvalidResultError(_not_a_known_result(result, version))
    missing = [k for k in ("run_id", "command", "status", "versions") if not result.get(k)]
    if missing:
        raise InvalidResultError(f"result is missing {', '.join(missing)} (docs/result-schema.md)")
    if not isinstance(result["status"], str) or result["status"] not in RUN_STATUSES:
        raise InvalidResultError(f"result status must be one of {RUN_STATUSES}, got {_bounded_repr(result['status'])}")
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


def _not_a_known_result(result: dict, version: Any) -> str:
    """Why a JSON object with no schema_version this envbuild reads is refused: not a result at all (no
    schema_version, or one no envbuild wrote), or a result of a newer envbuild (then, and only then, upgrade)."""
    if "schema_version" not in result:
        keys = ", ".join(sorted(result)[:6]) or "none"
        return (
            f"this JSON file is not an envbuild result: it has no schema_version (its keys: {_bounded_repr(keys)}); "
            "import the result.json that `envbuild run workload` wrote into its --out folder (docs/result-schema.md)"
        )
    newest = max(RESULT_SCHEMA_VERSIONS)
    if isinstance(version, int) and not isinstance(version, bool) and version > newest:
        return (
            f"result schema_version {version} is newer than this envbuild reads (up to {newest}): "
            "upgrade envbuild to import it"
        )
    return (
        f"result schema_version {_bounded_repr(version)} is not one any envbuild wrote (this one reads "
        f"{', '.join(map(str, RESULT_SCHEMA_VERSIONS))}): not a result of `envbuild run workload` (docs/result-schema.md)"
    )


def _bounded_repr(value: Any) -> str:
    """A value as Python writes it, cut at 60 characters with "…"."""
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "…"


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
            f" Restore it from a backup, or point --db / ${DB_ENV_VAR} at a new path"
        )


class ReadBudget:
    """An SQLite progress handler bounding a read of someone else's file: the query stops after `seconds`, or when
    Ctrl-C / SIGTERM arrives while SQLite runs. Python's handler for that signal raises inside this callback,
    where SQLite swallows it; used as a context manager, a wakeup fd notes the signal, and `reraise` raises the stop
    again once the query has stopped, so the command unwinds as for any Ctrl-C / SIGTERM."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.stopped: str | None = None
        self._pipe: tuple[int, int] | None = None
        self._previous = -1

    def __enter__(self) -> "ReadBudget":
        if threading.current_thread() is threading.main_thread():
            read, write = os.pipe()
            os.set_blocking(read, False)
            os.set_blocking(write, False)
            self._previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
            self._pipe = (read, write)
        return self

    def __exit__(self, *exc) -> None:
        if self._pipe is not None:
            signal.set_wakeup_fd(self._previous)
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None

    def __call__(self) -> int:
        if time.monotonic() > self.deadline:
            self.stopped = f"reading it took longer than {self.seconds:g} s"
            return 1
        return 0

    def reraise(self) -> None:
        """After a stopped query: the Ctrl-C / SIGTERM that stopped it, raised again (builder.interrupt)."""
        if self._pipe is None:
            return
        try:
            received = os.read(self._pipe[0], 64)
        except BlockingIOError:
            return
        for signum in received:
            if signum in (signal.SIGINT, signal.SIGTERM):
                raise stop_exception(signum)


def _connect_readonly(
    db: Path, *, require_current: bool = True, allow_new: bool = False, progress=None
) -> sqlite3.Connection | None:
    """A read-only connection to an existing, intact matrix file; StoreError otherwise (file untouched).

    `allow_new`: a file another process is creating right now (schema 0 and no tables yet) gives None.
    """
    if not db.exists():
        raise StoreError(
            f"no matrix database at {db}: record a run (`envbuild run workload`), import results"
            f" (`envbuild matrix import`), or point --db / ${DB_ENV_VAR} at an existing one"
        )
    if db.stat().st_size == 0:
        raise StoreError(
            f"{db} is empty (0 bytes), not a matrix database; nothing was changed."
            f" Remove it, or point --db / ${DB_ENV_VAR} at an existing matrix"
        )
    try:
        conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open matrix database {db}: {exc}") from exc
    if progress is not None:
        conn.set_progress_handler(progress, 10_000)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        version, empty = _check_readable(conn, db)
        if version == 0 and allow_new and empty:
            conn.close()
            return None
        if version == 0:
            raise StoreError(
                f"{db} is an SQLite file but not a matrix database; nothing was changed."
                f" Point --db / ${DB_ENV_VAR} at a matrix"
            )
        if require_current and version < SCHEMA_VERSION:
            raise StoreError(
                f"{db} has the older matrix schema {version} (this envbuild: {SCHEMA_VERSION});"
                " `envbuild matrix import` into it once upgrades it"
            )
    except BaseException:
        conn.close()
        raise
    return conn


def _check_readable(conn: sqlite3.Connection, db: Path) -> tuple[int, bool]:
    """Schema version, integrity and shape, read-only: (version, whether the file holds no schema object yet);
    StoreError without writing anything.

    All of it is read from one snapshot, so another process creating or migrating the file at this instant is
    seen before its commit or after it, never as a version from one moment and tables from the next.
    "database is locked" here is that process switching the file to WAL (SQLite answers some of those without
    waiting on the busy handler): retried until the busy timeout.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        conn.execute("BEGIN")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            problems = [row[0] for row in conn.execute("PRAGMA integrity_check")]
            empty = not conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{db} has matrix schema version {version}, newer than this envbuild knows ({SCHEMA_VERSION});"
                    " nothing was changed. Upgrade envbuild, or use another --db path"
                )
            if problems != ["ok"]:
                raise StoreError(
                    f"{db} failed its integrity check ({'; '.join(problems[:3])}); nothing was changed."
                    f" Restore it from a backup, or point --db / ${DB_ENV_VAR} at a new path"
                )
            if version > 0:
                check_shape(conn, db)
            return version, empty
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise StoreError(
                    f"{db} is corrupt ({exc}); nothing was changed. Restore it from a backup,"
                    f" or point --db / ${DB_ENV_VAR} at a new path"
                ) from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"{db} is corrupt ({exc}); nothing was changed. Restore it from a backup,"
                f" or point --db / ${DB_ENV_VAR} at a new path"
            ) from exc
        finally:
            conn.execute("ROLLBACK")
        time.sleep(0.05)


def _quoted(name: str) -> str:
    """An SQL identifier, quoted (names read from a file are data)."""
    return '"' + str(name).replace('"', '""') + '"'


def _shape(conn: sqlite3.Connection) -> tuple[set, dict]:
    """(every schema object as (type, name, table), {table or index: its PRAGMA table_xinfo / index_xinfo rows})."""
    objects = {tuple(row) for row in conn.execute("SELECT type, name, tbl_name FROM sqlite_master")}
    columns = {}
    for kind, name, _ in objects:
        pragma = "table_xinfo" if kind == "table" else "index_xinfo" if kind == "index" else None
        if pragma:
            columns[name] = [tuple(row) for row in conn.execute(f"PRAGMA {pragma}({_quoted(name)})")]
    return objects, columns


def _reference_shape(version: int) -> tuple[set, dict]:
    """The shape this envbuild's own migrations give a matrix file of schema `version`."""
    conn = sqlite3.connect(":memory:")
    try:
        for migration in MIGRATIONS[:version]:
            for statement in _statements(migration):
                conn.execute(statement)
        return _shape(conn)
    finally:
        conn.close()


def check_shape(conn: sqlite3.Connection, db: Path) -> None:
    """The file holds exactly the tables, columns and indexes of its matrix schema version (no views, triggers,
    virtual or generated columns, no other names): StoreError otherwise. Every read is a fixed query of our own
    schema, so this is what makes reading someone else's file safe. Read in one transaction: another process
    migrating the file meanwhile is seen before or after, never halfway."""
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        virtual = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%'"
        ).fetchall()
        objects, columns = _shape(conn)
    finally:
        if own:
            conn.execute("ROLLBACK")
    if version == 0:
        return
    want_objects, want_columns = _reference_shape(version)
    extra = sorted(f"{kind} {name!r}" for kind, name, _ in objects - want_objects)
    missing = sorted(f"{kind} {name!r}" for kind, name, _ in want_objects - objects)
    changed = sorted(name for name in want_columns if name in columns and columns[name] != want_columns[name])
    if virtual or extra or missing or changed:
        what = "; ".join(
            x
            for x in (
                f"virtual tables {[v[0] for v in virtual]}" if virtual else "",
                f"unknown {', '.join(extra)[:300]}" if extra else "",
                f"missing {', '.join(missing)[:300]}" if missing else "",
                f"other columns in {', '.join(changed)[:200]}" if changed else "",
            )
            if x
        )
        raise StoreError(
            f"{db} is not a matrix file of schema {version} as envbuild writes it ({what}); nothing "
            "was read. Export it with the envbuild that made it, or import its result.json files"
        )


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
