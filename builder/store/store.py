"""The compatibility matrix on disk: one SQLite file with a versioned schema and transactional writes.

Open it with `MatrixStore.open(path)` (a context manager). Opening checks the file before anything
is written: a file that is not SQLite, fails `PRAGMA integrity_check`, or carries a schema newer than
this envbuild knows raises `StoreError` and leaves the file's bytes as they were. Every write runs in
one `BEGIN IMMEDIATE` transaction, so concurrent writers (two runs finishing at once) queue on the
busy timeout instead of losing rows; WAL mode lets readers go on meanwhile.

The module is a facade: `MatrixStore` is assembled from the connection and schema (store_schema), the
writes (store_writes) and the reads (store_reads); import everything from here.
"""

from __future__ import annotations

from builder.paths import DB_ENV_VAR, DEFAULT_DB_NAME, default_db_path
from builder.store.store_reads import DamagedRow, StoreReads
from builder.store.store_schema import (
    BUILD_STATUSES,
    BUSY_TIMEOUT_MS,
    MIGRATIONS,
    RESULT_SCHEMA_VERSIONS,
    RUN_STATUSES,
    SCHEMA_VERSION,
    InvalidResultError,
    RunConflictError,
    StoreError,
    canonical_json,
    validate_result,
)
from builder.store.store_writes import RecordedRun, StoreWrites, utc_now

__all__ = [
    "BUILD_STATUSES",
    "BUSY_TIMEOUT_MS",
    "DB_ENV_VAR",
    "DEFAULT_DB_NAME",
    "MIGRATIONS",
    "RESULT_SCHEMA_VERSIONS",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "DamagedRow",
    "InvalidResultError",
    "MatrixStore",
    "RecordedRun",
    "RunConflictError",
    "StoreError",
    "canonical_json",
    "default_db_path",
    "read_mergeable",
    "utc_now",
    "validate_result",
]


class MatrixStore(StoreWrites, StoreReads):
    """A connection to one matrix database file. Use `MatrixStore.open(path)`."""


read_mergeable = MatrixStore.read_mergeable
