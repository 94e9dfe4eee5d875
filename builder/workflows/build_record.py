"""A build attempt's record: its own directory (context, full log, attempt.json, build-record.json) and its matrix
row. build-record.json is the typed record a contributor can sign and send home (builder.store.build_record_schema,
docs/build-record.md)."""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from builder import __version__
from builder.engine import ccache_stats
from builder.engine.build import BuildOutcome, base_digest
from builder.engine.build_host import MemoryPeak
from builder.engine.build_log import BuildFailure
from builder.engine.docker import EngineUnavailable, detect_build_tool
from builder.plan.context_identity import request_of, wheelhouse_of
from builder.store import build_record_schema
from builder.store.attempts import keep_context, keep_file, new_attempt, relative_to_db, write_record
from builder.store.store import MatrixStore, StoreError, utc_now
from builder.plan.cells import Cell
from builder.paths import BUILD_LOG, BUILD_RECORD


@dataclass(frozen=True)
class Measured:
    """What the build workflow measured around one build: its UTC start and end, wall time, host memory in use."""

    started_at: str
    finished_at: str
    seconds: float
    memory: MemoryPeak | None


@dataclass(frozen=True)
class Recorded:
    """The build was filed in the matrix `db`; its attempt directory, and its build-record.json (None: the context's
    manifest does not say enough for one)."""

    db: Path
    directory: Path
    build_record: Path | None


@dataclass
class BuildAttempt:
    """One `envbuild image` build on its way into the matrix; `finish` records it, `discard` drops it."""

    db: Path
    directory: Path
    context_dir: Path
    manifest: dict
    tag: str
    log_path: Path  # where BuildKit's log is written (the attempt's build.log unless --log)
    uid: str
    compile_jobs: dict | None = None  # a source build's MAX_JOBS and why (build.CompileJobs.as_record)
    measured: Measured | None = None  # set by the build workflow when the build ends
    links: dict = field(default_factory=dict)  # "sbom", "provenance": files beside the record (build_provenance)

    @classmethod
    def start(
        cls, db: Path, context_dir: Path, manifest: dict | None, tag: str, log_path: Path | None
    ) -> "BuildAttempt | None":
        """A new attempt directory, or None when the manifest names no cell (such a build is not recorded)."""
        if not (manifest or {}).get("cell"):
            return None
        uid = uuid.uuid4().hex
        directory = new_attempt(db, "build", uid)
        return cls(
            Path(db),
            directory,
            Path(context_dir),
            manifest,
            tag,
            Path(log_path) if log_path else directory / BUILD_LOG,
            uid,
        )

    def discard(self) -> None:
        """Nothing was attempted (no engine, a bad option, an existing image): no record."""
        shutil.rmtree(self.directory, ignore_errors=True)

    def finish(
        self,
        status: str,
        failure_class: str | None,
        error: str | None,
        outcome: BuildOutcome | None,
        notify: Callable[[object], None],
        failure: BuildFailure | None = None,
    ) -> None:
        """Copy the context and log into the attempt, write attempt.json and build-record.json, record the build
        (StoreError raises) and tell it (Recorded)."""
        keep_context(self.context_dir, self.directory)
        log = self.directory / BUILD_LOG
        if self.log_path != log:
            keep_file(self.log_path, self.directory, BUILD_LOG)
        base = self.manifest.get("base_image")
        digest = base_digest(base, log)
        image_id = outcome.image_id if outcome else None
        record = {
            "kind": "build",
            "id": self.uid,
            "cell": self.manifest["cell"],
            "status": status,
            "failure_class": failure_class,
            "error": error,
            "image_tag": self.tag,
            "image_id": image_id,
            "context_hash": self.manifest.get("context_hash"),
            "base_image": base,
            "base_digest": digest,
            "finished_at": utc_now(),
            "context": str(self.context_dir.resolve()),
        }
        write_record(self.directory, record)
        document = self.build_record(status, failure_class, error, outcome, failure, log, digest)
        if document is not None:
            write_record(self.directory, document, BUILD_RECORD)
        with MatrixStore.open(self.db) as store:
            store.record_build(
                Cell(**self.manifest["cell"]),
                status=status,
                failure_class=failure_class,
                error=error,
                recipe_hash=self.manifest.get("recipe_hash"),
                context_hash=self.manifest.get("context_hash"),
                image_tag=self.tag,
                image_digest=image_id,
                duration_s=round(outcome.seconds, 1) if outcome else None,
                log_path=str(log) if log.is_file() else None,
                manifest=self.manifest,
                build_uid=self.uid,
                attempt_dir=relative_to_db(self.db, self.directory),
                base_image=base,
                base_digest=digest,
                record=document,
            )
        notify(Recorded(self.db, self.directory, self.directory / BUILD_RECORD if document is not None else None))

    def build_record(
        self,
        status: str,
        failure_class: str | None,
        error: str | None,
        outcome: BuildOutcome | None,
        failure: BuildFailure | None,
        log: Path,
        digest: str | None,
    ) -> dict | None:
        """The build's typed record (build_record_schema), or None for a context whose manifest does not say its
        request (a hand-made one): such a build cannot be recomputed, so it has nothing to send home."""
        try:
            request, wheelhouse = request_of(self.manifest), wheelhouse_of(self.manifest)
        except (KeyError, TypeError):
            return None
        measured = self.measured or Measured(utc_now(), utc_now(), 0.0, None)
        stats = ccache_stats.from_log(log) if log.is_file() else None
        memory = measured.memory
        document = {
            "format": build_record_schema.FORMAT,
            "schema_version": 1,
            "build_id": self.uid,
            "cell": self.manifest["cell"],
            "request": request,
            "context_hash": self.manifest.get("context_hash"),
            "wheelhouse": wheelhouse,
            "recipe_hash": self.manifest.get("recipe_hash"),
            "image_tag": self.tag,
            "status": status,
            "failure": None,
            "started_at": measured.started_at,
            "finished_at": measured.finished_at,
            "wall_time_s": round(outcome.seconds, 1) if outcome else measured.seconds,
            "memory": {
                "scope": "host",
                "peak_bytes": memory.peak_bytes,
                "start_bytes": memory.start_bytes,
                "total_bytes": memory.total_bytes,
                "samples": memory.samples,
                "interval_s": memory.interval_s,
            }
            if memory
            else None,
            "compile_jobs": self.compile_jobs,
            "ccache": {"measured": True, "hits": stats.hits, "misses": stats.misses, "note": "ccache --show-stats"}
            if stats
            else {"measured": False, "note": "not measured: no step of this build printed ccache statistics"},
            "image": {"digest": outcome.image_id, "tag": self.tag} if outcome and outcome.image_id else None,
            "verify_checks": build_record_schema.verify_check_count(self.manifest),
            "base": {"image": self.manifest.get("base_image"), "digest": digest},
            "builder": {"tool": outcome.tool if outcome else _build_tool(), "envbuild_version": __version__},
            "sbom": self.links.get("sbom"),
            "provenance": self.links.get("provenance"),
        }
        if status == "fail":
            document["failure"] = {
                "failure_class": failure_class or "unknown",
                "step": _clip(failure.step if failure else "(no step: the build was stopped)"),
                "message": _clip((failure.message if failure else error) or ""),
                "hint": _clip(failure.hint if failure else ""),
                "log_tail": [_clip(line) for line in failure.tail[-build_record_schema.MAX_TAIL_LINES :]]
                if failure
                else [],
                "evidence": [_clip(line) for line in failure.evidence[:50]] if failure else [],
            }
        try:
            return build_record_schema.validate(document)
        except build_record_schema.BuildRecordError as exc:  # our own document: a bug, never the user's input
            raise StoreError(f"the build record breaks its own schema ({exc})") from exc


def _clip(text: str, limit: int = 2000) -> str:
    """A line of build output as a record keeps it: at most `limit` characters (a compiler's command line can be
    longer than the schema's 4096)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _build_tool() -> str:
    try:
        return detect_build_tool().describe
    except EngineUnavailable:
        return "BuildKit (client not found)"
