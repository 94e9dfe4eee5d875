"""The whole-matrix reads a report makes besides its summaries: every train run's throughput, the newest `speed`
run of each cell, the newest run of each preset of each cell.

`ReadsAhead(store)` starts them in a thread on its own read-only connection, so that they run (in SQLite, outside
the GIL) while the caller collects the summaries on the other core; `result()` waits for them. The thread only
reads: a caller that fails before asking for the result leaves it to end with the process.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from builder.report import ladder as cell_ladder
from builder.store.store import MatrixStore


@dataclass(frozen=True)
class MatrixReads:
    train_metrics: list[dict]  # MatrixStore.train_metrics()
    speed: dict[str, dict]  # MatrixStore.newest_of_preset(SPEED_PRESET)
    per_preset: dict[str, list[dict]]  # MatrixStore.newest_per_preset()


def read(store: MatrixStore) -> MatrixReads:
    """The reads, made now on `store`'s own connection."""
    return MatrixReads(
        train_metrics=store.train_metrics(),
        speed=store.newest_of_preset(cell_ladder.SPEED_PRESET),
        per_preset=store.newest_per_preset(),
    )


class ReadsAhead:
    """`read(store)` in a thread on a sibling connection; the rows it skipped are added to `store.damaged`."""

    def __init__(self, store: MatrixStore):
        self._store = store
        self._reader: MatrixStore | None = None
        self._outcome: MatrixReads | BaseException = RuntimeError("the matrix reads were not made")
        self._thread = threading.Thread(target=self._run, name="report-matrix-reads", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._reader = self._store.sibling()
            try:
                self._outcome = read(self._reader)
            finally:
                self._reader.close()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            self._outcome = exc

    def result(self) -> MatrixReads:
        """The reads, once they are done (the thread's error raised here)."""
        self._thread.join()
        if self._reader is not None:
            self._store.damaged.extend(self._reader.damaged)
            self._store.bad_text += self._reader.bad_text
            self._reader = None  # noted once
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        return self._outcome
