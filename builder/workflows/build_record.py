"""A build attempt's record: its own directory (context, full log, attempt.json) and its matrix row."""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from builder.engine.build import BuildOutcome, base_digest
from builder.store.attempts import keep_context, keep_file, new_attempt, relative_to_db, write_record
from builder.store.store import MatrixStore, utc_now
from builder.plan.cells import Cell
from builder.paths import BUILD_LOG


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
        self, status: str, failure_class: str | None, error: str | None, outcome: BuildOutcome | None, console: Console
    ) -> None:
        """Copy the context and log into the attempt, write attempt.json, record the build (StoreError raises)."""
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
            )
        console.print(f"recorded the build in {escape(str(self.db))}; attempt: {escape(str(self.directory))}")
