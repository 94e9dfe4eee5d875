"""The matrix's reads. They are tolerant: a row whose stored JSON does not parse (byte damage passes
SQLite's integrity check) is skipped and noted in `store.damaged`, so one bad row never hides the rest."""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from builder import bounded_read
from builder.store import build_record_schema, result_schema, run_config
from builder.store.provenance import KINDS, PUBLISHED, REVOKED, UNSIGNED
from builder.store.store_schema import (
    RUN_STATUSES,
    DamagedRow,
    InvalidResultError,
    ReadBudget,
    StoreConnection,
    StoreError,
    _first_error,
    _is_result,
    _quoted,
    _bounded_repr,
    validate_result,
)
from builder.plan.cells import Cell


class StoreReads(StoreConnection):
    """The reads of `MatrixStore`; `self.damaged` lists the rows they skipped."""

    def cells(self) -> list[Cell]:
        """Every cell that has a build or a run recorded, ordered by key (unreadable coordinates skipped)."""
        out = []
        for row_id, key, *coords in self._rows(
            "SELECT id, key, flavor, accel_version, torch, arch, python FROM cells ORDER BY key"
        ):
            try:
                cell = Cell(**dict(zip(("flavor", "accel_version", "torch", "arch", "python"), coords)))
                if cell.key != key:
                    raise ValueError(f"the key does not name its coordinates ({cell.key})")
                out.append(cell)
            except ValueError as exc:
                self.damaged.append(DamagedRow("cells", row_id, key, "coordinates", _first_error(exc)))
        return out

    def runs(self, cell_key: str | None = None, *, last: int | None = None) -> list[dict]:
        """Recorded runs (oldest first): the stored result.json plus `cell_key`, `row_id`, `build_id`, `counts`,
        `provenance` (a kind of builder.store.provenance), `signer` and `attestation` (the DSSE envelope text).

        `last`: only the newest `last` runs of each cell (what a page shows; full history: `runs_json`).
        """
        sql = (
            "SELECT runs.id, runs.run_id, cells.key, runs.build_id, CAST(runs.result_json AS BLOB),"
            " runs.source, runs.recorded_at, runs.attempt_dir, runs.counts, runs.provenance, runs.signer,"
            " runs.attestation_json, runs.schema_checked FROM runs JOIN cells ON cells.id = runs.cell_id"
            " WHERE 1"
        )
        args: list = []
        if cell_key is not None:
            sql += " AND cells.key = ?"
            args.append(cell_key)
        if last is not None:
            sql += (
                " AND runs.id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY cell_id"
                " ORDER BY COALESCE(finished_at, recorded_at) DESC, id DESC) AS n FROM runs) WHERE n <= ?)"
            )
            args.append(last)
        sql += " ORDER BY COALESCE(runs.finished_at, runs.recorded_at), runs.id"
        out = []
        for (
            row_id,
            run_id,
            key,
            build_id,
            blob,
            source,
            recorded_at,
            attempt_dir,
            counts,
            provenance,
            signer,
            attestation,
            checked,
        ) in self._rows(sql, args):
            result = self._result(row_id, run_id, blob, checked)
            if row_id in self.provenance_now:  # derived again from the current signer files
                provenance, signer = self.provenance_now[row_id].kind, self.provenance_now[row_id].signer
            if result is not None:
                out.append(
                    {
                        "row_id": row_id,
                        "cell_key": key,
                        "build_id": build_id,
                        "source": source,
                        "recorded_at": recorded_at,
                        "attempt_dir": attempt_dir,
                        "counts": bool(counts),
                        "provenance": provenance if provenance in KINDS else UNSIGNED,
                        "signer": signer if provenance in (*PUBLISHED, REVOKED) else None,
                        "attestation": attestation,
                        "result": result,
                    }
                )
        return out

    def runs_json(self, cell_key: str, *, host_keys: tuple[str, ...] | None = None) -> list[str]:
        """A cell's stored result.json texts (oldest first, unparsed: fast at any size), damaged rows left out.

        `host_keys`: keep only these keys of each run's `host` block, plus `gpu_count` (None: all of it).
        """
        return [text for text, _ in self._runs_json(cell_key, host_keys, with_curves=False)]

    def runs_json_curves(self, cell_key: str, *, host_keys: tuple[str, ...] | None = None) -> list[tuple[str, int]]:
        """`runs_json`, each text with the length of its longest curve (metrics.curves; 0 without one), measured
        by SQLite: a caller that only shortens long curves parses none of the others."""
        return self._runs_json(cell_key, host_keys, with_curves=True)

    def _runs_json(
        self, cell_key: str, host_keys: tuple[str, ...] | None, *, with_curves: bool
    ) -> list[tuple[str, int]]:
        column = "runs.result_json"
        args: list = []
        if host_keys is not None:
            pairs = ", ".join("?, runs.result_json -> ?" for _ in host_keys)
            column = (
                f"CASE WHEN json_type(runs.result_json, '$.host') = 'object' THEN json_set(runs.result_json,"
                f" '$.host', json_object({pairs}, 'gpu_count',"
                " COALESCE(json_array_length(runs.result_json, '$.host.gpus'), 0))) ELSE runs.result_json END"
            )
            for key in host_keys:
                args += [key, f"$.host.{key}"]
        longest = (
            (
                "(SELECT MAX(CASE WHEN curve.type = 'array' THEN json_array_length(curve.value) END)"
                " FROM json_each(runs.result_json, '$.metrics.curves') AS curve"
                " WHERE json_type(runs.result_json, '$.metrics.curves') = 'object')"
            )
            if with_curves
            else "0"
        )
        cur = self._rows(
            f"SELECT json_valid(runs.result_json), runs.id, runs.run_id,"
            f" CASE WHEN json_valid(runs.result_json) THEN {column} END,"
            f" CASE WHEN json_valid(runs.result_json) THEN {longest} END"
            " FROM runs JOIN cells ON cells.id = runs.cell_id"
            " WHERE cells.key = ? ORDER BY COALESCE(runs.finished_at, runs.recorded_at), runs.id",
            [*args, cell_key],
        )
        out = []
        for valid, row_id, run_id, text, curve in cur:
            if valid:
                out.append((text, curve or 0))
            else:
                self.damaged.append(DamagedRow("runs", row_id, str(run_id), "result_json", "not valid JSON"))
        return out

    def newest_per_preset(self) -> dict[str, list[dict]]:
        """cell key -> the newest run of each `config.preset` (the `preset` column), newest first; only those
        are parsed (a damaged one is skipped and noted)."""
        cur = self._rows(
            "SELECT runs.id, runs.run_id, cells.key, CAST(runs.result_json AS BLOB), runs.schema_checked FROM runs"
            " JOIN cells ON cells.id = runs.cell_id WHERE runs.id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER"
            " (PARTITION BY cell_id, preset ORDER BY COALESCE(finished_at, recorded_at) DESC, id DESC) AS n"
            " FROM runs) WHERE n = 1)"
            " ORDER BY cells.key, COALESCE(runs.finished_at, runs.recorded_at) DESC, runs.id DESC"
        )
        out: dict[str, list[dict]] = {}
        for row_id, run_id, key, blob, checked in cur:
            result = self._result(row_id, run_id, blob, checked)
            if result is not None:
                out.setdefault(key, []).append(result)
        return out

    def newest_of_preset(self, preset: str) -> dict[str, dict]:
        """cell key -> the newest run whose `config.preset` is `preset` (the `preset` column), as `runs` gives a row
        (result, provenance, signer); only those are parsed (a damaged one is skipped and noted)."""
        cur = self._rows(
            "SELECT runs.id, runs.run_id, cells.key, CAST(runs.result_json AS BLOB), runs.schema_checked,"
            " runs.provenance, runs.signer FROM runs JOIN cells ON cells.id = runs.cell_id WHERE runs.id IN"
            " (SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY cell_id ORDER BY"
            " COALESCE(finished_at, recorded_at) DESC, id DESC) AS n FROM runs WHERE preset = ?) WHERE n = 1)",
            (preset,),
        )
        out: dict[str, dict] = {}
        for row_id, run_id, key, blob, checked, kind, signer in cur:
            result = self._result(row_id, run_id, blob, checked)
            if result is not None:
                kind = kind if kind in KINDS else UNSIGNED
                out[key] = {"result": result, "provenance": kind, "signer": signer if kind in PUBLISHED else None}
        return out

    def train_metrics(self) -> list[dict]:
        """Every train run's cell_key, time (`at`), samples_per_s and mfu (columns filled on import),
        `configuration` (run_config.RunConfiguration, from the stored JSON where it is valid) and `contended`
        (the run's conditions.contended is true), oldest first."""
        cur = self._rows(
            "SELECT cells.key, COALESCE(runs.finished_at, runs.started_at, runs.recorded_at) AS at,"
            f" runs.samples_per_s, runs.mfu, {run_config.SQL.replace('result_json', 'runs.result_json')},"
            " CASE WHEN json_valid(runs.result_json) THEN json_type(runs.result_json, '$.conditions.contended') END"
            " FROM runs JOIN cells ON cells.id = runs.cell_id"
            " WHERE runs.command = 'train' ORDER BY at, runs.id"
        )
        return [
            {
                "cell_key": k,
                "at": at,
                "samples_per_s": sps,
                "mfu": mfu,
                "configuration": run_config.of_row(c),
                "contended": flag == "true",
            }
            for k, at, sps, mfu, c, flag in cur
        ]

    def run_events(self, cell_key: str | None = None) -> list[dict]:
        """Every run as the few columns a verdict needs, oldest first: fast, the result.json is not read.

        Keys: cell_key, run_id, status, error_class, error, at, failed_probes (names, comma-separated),
        counts (a verdict, not only an attempt), base_image, base_digest, context_hash, attempt_dir, and
        `configuration` (run_config.RunConfiguration: the few result fields it needs, read only where the
        stored JSON is valid). A row whose status column is damaged is skipped and noted.
        """
        cur = self._rows(
            "SELECT runs.id, cells.key, runs.run_id, runs.status, runs.error_class, runs.error,"
            " COALESCE(runs.finished_at, runs.started_at, runs.recorded_at) AS at,"
            " (SELECT group_concat(name, ', ') FROM probes WHERE run_row = runs.id AND status = 'fail'),"
            " runs.counts, runs.base_image, runs.base_digest, runs.context_hash, runs.attempt_dir,"
            f" {run_config.SQL}"
            " FROM runs JOIN cells ON cells.id = runs.cell_id WHERE ? IS NULL OR cells.key = ? ORDER BY at, runs.id",
            (cell_key, cell_key),
        )
        names = (
            "cell_key",
            "run_id",
            "status",
            "error_class",
            "error",
            "at",
            "failed_probes",
            "counts",
            "base_image",
            "base_digest",
            "context_hash",
            "attempt_dir",
            "configuration",
        )
        events = []
        for row_id, *row in cur:
            event = dict(zip(names, row))
            event["configuration"] = run_config.of_row(event["configuration"])
            if event["status"] in RUN_STATUSES and isinstance(event["at"], str):
                events.append(event)
            else:
                self.damaged.append(DamagedRow("runs", row_id, str(event["run_id"]), "status", "not a run status"))
        return events

    def builds(self, cell_key: str | None = None, *, manifests: bool = True) -> list[dict]:
        """Recorded builds (oldest first) as dicts of their columns plus `cell_key` and `cell` (coordinates).

        `manifests=False`: no parsed `manifest` (None); instead the two facts the verdicts and the ladder read of it,
        extracted by SQLite where the stored JSON is valid: `torch_proof` (torch.git.proof when it is text) and
        `verify_checks` (the length of verify.checks when it is a list). Fast at 10,000 builds."""
        # every column but the manifest's text (its bytes may not be UTF-8: read as a blob, checked by _json);
        # a fixed list of our own schema, never names read from the file
        columns = ", ".join(f"builds.{c}" for c in _BUILD_READ_COLUMNS)
        manifest = "CAST(builds.manifest_json AS BLOB)" if manifests else "NULL"
        facts = (
            ""
            if manifests
            else (
                ", CASE WHEN json_valid(builds.manifest_json) AND json_type(builds.manifest_json, '$.torch.git.proof')"
                " = 'text' THEN json_extract(builds.manifest_json, '$.torch.git.proof') END AS torch_proof,"
                " CASE WHEN json_valid(builds.manifest_json) AND json_type(builds.manifest_json, '$.verify.checks')"
                " = 'array' THEN json_array_length(builds.manifest_json, '$.verify.checks') END AS verify_checks,"
                " builds.manifest_json IS NOT NULL AND NOT json_valid(builds.manifest_json) AS manifest_damaged"
            )
        )
        sql = (
            f"SELECT {columns}, {manifest} AS manifest_blob, CAST(builds.record_json AS BLOB) AS record_blob{facts},"
            " cells.key AS cell_key,"
            " cells.flavor AS cell_flavor, cells.accel_version AS cell_accel_version, cells.torch AS cell_torch,"
            " cells.arch AS cell_arch, cells.python AS cell_python FROM builds JOIN cells ON cells.id = builds.cell_id"
        )
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
            blob = build.pop("manifest_blob")
            if build.pop("manifest_damaged", 0):  # manifests=False: named as damaged all the same
                self.damaged.append(
                    DamagedRow("builds", build["id"], str(build["build_uid"]), "manifest_json", "not valid JSON")
                )
            build["manifest"] = None
            if blob is not None:  # a damaged manifest is named in `damaged`; the build's own columns still count
                build["manifest"] = self._json(
                    "builds", build["id"], build["build_uid"], "manifest_json", blob, lambda v: isinstance(v, dict)
                )
            build["cell"] = {
                name: build.pop(f"cell_{name}") for name in ("flavor", "accel_version", "torch", "arch", "python")
            }
            build["record"] = self._build_record(build["id"], build["build_uid"], build.pop("record_blob"))
            if build["id"] in self.build_provenance_now:  # derived again from the current signer files
                now = self.build_provenance_now[build["id"]]
                build["provenance"], build["signer"] = now.kind, now.signer
            if build["provenance"] not in KINDS:
                build["provenance"] = UNSIGNED
            if build["provenance"] not in (*PUBLISHED, REVOKED):
                build["signer"] = None
            out.append(build)
        return out

    def _build_record(self, row_id: int, ident: str, blob: bytes | None) -> dict | None:
        """A build's stored record, checked by build_record_schema (a file from elsewhere may hold anything); None,
        and a DamagedRow noted, when it does not parse or breaks the schema."""
        if blob is None:
            return None
        record = self._json("builds", row_id, ident, "record_json", blob, lambda v: isinstance(v, dict))
        if record is None:
            return None
        try:
            return build_record_schema.validate(record)
        except build_record_schema.BuildRecordError as exc:
            self.damaged.append(DamagedRow("builds", row_id, str(ident), "record_json", exc.problems[0]))
            return None

    def has_build(self, build_uid: str) -> bool:
        return self._conn.execute("SELECT 1 FROM builds WHERE build_uid = ?", (build_uid,)).fetchone() is not None

    def signed_builds(self) -> list[tuple[int, str, str | None, str | None]]:
        """(row id, build_uid, signer, attestation envelope) of every build stored as signed (ci or contributed)."""
        marks = ", ".join("?" for _ in PUBLISHED)
        return list(
            self._rows(
                f"SELECT id, build_uid, signer, attestation_json FROM builds WHERE provenance IN ({marks})", PUBLISHED
            )
        )

    def signed_runs(self) -> list[tuple[int, str, str | None, str | None]]:
        """(row id, run_id, signer, attestation envelope) of every run stored as signed (ci or contributed)."""
        marks = ", ".join("?" for _ in PUBLISHED)
        return list(
            self._rows(
                f"SELECT id, run_id, signer, attestation_json FROM runs WHERE provenance IN ({marks})", PUBLISHED
            )
        )

    def probe_rows(self, run_row: int) -> list[dict]:
        cur = self._rows(
            "SELECT name, status, message, CAST(values_json AS BLOB) FROM probes WHERE run_row = ? ORDER BY name",
            (run_row,),
        )
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
            " OR json_type(result_json, '$.command') IS NOT 'text' ORDER BY id"
        ):
            self.damaged.append(DamagedRow("runs", row_id, str(run_id), "result_json", "not a JSON result object"))
        self.builds()
        for row_id, name in self._conn.execute(
            "SELECT run_row, name FROM probes WHERE values_json IS NOT NULL AND (NOT json_valid(values_json)"
            " OR json_type(values_json) IS NOT 'object') ORDER BY run_row"
        ):
            self.damaged.append(DamagedRow("probes", row_id, str(name), "values_json", "not a JSON object"))
        self._check_text()
        unique = {(d.table, d.row_id, d.column): d for d in reversed(self.damaged)}  # first finding per column
        return sorted(unique.values(), key=lambda d: (d.table != "cells", d.table, d.row_id, d.column))

    def _check_text(self) -> None:
        """Every TEXT value that is not UTF-8, as a DamagedRow (read as bytes, so nothing is replaced)."""
        idents = {"cells": "key", "builds": "build_uid", "runs": "run_id", "probes": "name"}
        for table, ident in idents.items():
            columns = [row[1] for row in self._conn.execute(f"PRAGMA table_info({table})")]
            quoted = [_quoted(c) for c in columns]  # the shape check knows them; quoted all the same
            row_key = "run_row" if table == "probes" else "id"
            cur = self._conn.execute(
                f"SELECT {row_key}, CAST({ident} AS BLOB), "
                + ", ".join(f"CAST({c} AS BLOB)" for c in quoted)
                + f" FROM {table} WHERE "
                + " OR ".join(f"typeof({c}) = 'text'" for c in quoted)
            )
            for row_id, name, *values in cur:
                for column, value in zip(columns, values):
                    if isinstance(value, bytes):
                        try:
                            value.decode("utf-8")
                        except UnicodeDecodeError as exc:
                            self.damaged.append(
                                DamagedRow(
                                    table,
                                    row_id,
                                    bytes(name or b"").decode("utf-8", "replace"),
                                    column,
                                    f"not UTF-8 ({exc.reason} at byte {exc.start})",
                                )
                            )

    def integrity_ok(self) -> bool:
        return self._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    def _result(self, row_id: int, run_id: str, blob: bytes, checked: int) -> dict | None:
        """A stored result, parsed; one that did not pass the result schema on its way in (`schema_checked`
        0: stored by an older envbuild) is checked now. None, and a DamagedRow noted, when it is not one."""
        result = self._json("runs", row_id, run_id, "result_json", blob, _is_result)
        if result is None or checked:
            return result
        try:
            return result_schema.validate(result)
        except result_schema.ResultSchemaError as exc:
            self.damaged.append(
                DamagedRow("runs", row_id, str(run_id), "result_json", f"breaks the result schema: {exc.problems[0]}")
            )
            return None

    @classmethod
    def read_mergeable(cls, other: str | os.PathLike) -> tuple[list[tuple[int, Cell, dict]], list[dict]]:
        """Every build and run of another matrix file, each checked by the result schema; reads only.

        Returns ([(source build id, cell, build columns)], [run rows with `result` cleaned]). Raises
        StoreError for a file that cannot be read, InvalidResultError naming the first row that breaks the
        schema (a damaged row counts: merging a file should not lose rows silently).
        """
        with tempfile.TemporaryDirectory(prefix="envbuild-merge-") as tmp:
            copy = _private_copy(Path(other), Path(tmp))
            with ReadBudget(MERGE_READ_SECONDS) as budget:
                try:
                    source = cls.connect(copy, readonly=True, progress=budget)
                    try:
                        raw_builds, raw_runs = source.builds(), source.runs()
                        damaged = source.damaged
                    finally:
                        source.close()
                except (sqlite3.Error, StoreError) as exc:
                    budget.reraise()
                    why = budget.stopped or str(exc)
                    raise StoreError(f"{other}: cannot be merged ({why.replace(str(copy), str(other))})") from None
        if damaged:
            raise InvalidResultError(
                f"{other}: {damaged[0]}; `envbuild matrix check --db {other}` lists every such row"
            )
        builds = []
        for build in raw_builds:
            try:
                cell = Cell(**build["cell"])
                if cell.key != build["cell_key"]:
                    raise ValueError(f"cell key {build['cell_key']!r} does not name its coordinates ({cell.key})")
                clean = result_schema.validate_build({k: build[k] for k in _BUILD_COLUMNS if k != "record"})
                clean["record"] = build_record_schema.validate(build["record"]) if build["record"] else None
            except (ValueError, TypeError) as exc:
                raise InvalidResultError(
                    f"builds row {build['id']} ({_bounded_repr(build.get('build_uid'))}): {_first_error(exc)}"
                ) from None
            builds.append((build["id"], cell, clean))
        runs = []
        for row in raw_runs:
            try:
                result = validate_result(row["result"])
            except InvalidResultError as exc:
                raise InvalidResultError(
                    f"runs row {row['row_id']} ({_bounded_repr(row['result'].get('run_id'))}): {exc}"
                ) from None
            if Cell.from_result(result).key != row["cell_key"]:
                raise InvalidResultError(
                    f"runs row {row['row_id']}: stored under cell {row['cell_key']}, but its"
                    f" result names {Cell.from_result(result).key}"
                )
            runs.append({**row, "result": result})
        return builds, runs

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


#: What a merge may spend reading another matrix file (a CI job's is read in well under a second).
MERGE_READ_SECONDS = 300
_BUILD_READ_COLUMNS = (
    "id",
    "build_uid",
    "cell_id",
    "recipe_hash",
    "context_hash",
    "image_tag",
    "image_digest",
    "duration_s",
    "log_path",
    "status",
    "failure_class",
    "error",
    "created_at",
    "counts",
    "attempt_dir",
    "base_image",
    "base_digest",
    "provenance",
    "signer",
    "attestation_json",
)


#: What another matrix file (and its -wal) may weigh: a CI job's holds a few runs (kilobytes to megabytes).
MAX_MERGE_BYTES = 256 << 20


def _private_copy(source: Path, folder: Path) -> Path:
    """A copy of another matrix file (and its -wal) in `folder`, read by builder.bounded_read (a regular file
    of at most MAX_MERGE_BYTES, no symlink, no FIFO): what is checked is what is read, and the original is
    never opened by SQLite. StoreError otherwise."""
    target = folder / "merged.db"
    for suffix in ("", "-wal"):
        path = Path(f"{source}{suffix}")
        try:
            bounded_read.copy_file(path, f"{target}{suffix}", MAX_MERGE_BYTES)
        except FileNotFoundError:
            if suffix:
                continue
            raise StoreError(f"{source}: no such file") from None
        except bounded_read.BoundedReadError as exc:
            raise StoreError(
                f"{path}: {exc}; a matrix file to merge is a regular file of at most {MAX_MERGE_BYTES >> 20} MiB"
            ) from None
        except OSError as exc:
            raise StoreError(f"{path}: cannot be read ({exc.strerror})") from None
    return target


_BUILD_COLUMNS = (
    "build_uid",
    "status",
    "failure_class",
    "error",
    "recipe_hash",
    "context_hash",
    "image_tag",
    "image_digest",
    "base_image",
    "base_digest",
    "duration_s",
    "log_path",
    "attempt_dir",
    "manifest",
    "created_at",
    "record",
)
