"""The site's per-cell data files (data/<slug>.json), written by one worker thread while the pages are drawn.

Each cell's data file holds every stored run of the cell (curves thinned), read through the worker's own
read-only connection to the matrix file: SQLite reads and the file writes run outside the GIL, so on two
cores they overlap the page rendering. `DataFiles` is a context manager: leaving it waits for the worker;
leaving it with an exception (Ctrl-C included) stops the worker after the cell it is writing, so the caller
can remove the half-built site with nothing still writing into it.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from builder.report.curve_points import REPORT_POINTS, thin_run_json
from builder.store.store import MatrixStore

#: A per-cell data file holds runs up to about this many bytes; older runs go to data/<cell>-runs-<n>.json.
DATA_FILE_BYTES = 900_000


class DataFiles:
    """`with DataFiles(store, root, host_keys) as files: files.add(key, slug, record)`: each added cell's data
    file is written in the background, in order; the block's end waits for all of them (and raises the
    worker's error, if it had one). The rows the worker's reads skipped are added to `store.damaged`."""

    def __init__(self, store: MatrixStore, root: Path, host_keys: tuple[str, ...] | None):
        self._store, self._root, self._host_keys = store, root, host_keys
        self._cells: list[tuple[str, str, dict] | None] = []
        self._ready = threading.Condition()
        self._stop = False
        self._error: BaseException | None = None
        self._reader: MatrixStore | None = None
        self._thread = threading.Thread(target=self._run, name="report-data-files", daemon=True)

    def __enter__(self) -> DataFiles:
        self._thread.start()
        return self

    def add(self, key: str, slug: str, record: dict) -> None:
        """Queue the data file of cell `key` (file name `slug`) with its summary `record` (runs are added)."""
        with self._ready:
            self._cells.append((key, slug, record))
            self._ready.notify()

    def __exit__(self, exc_type, exc, tb) -> None:
        with self._ready:
            self._stop = exc_type is not None
            self._cells.append(None)  # the end of the queue
            self._ready.notify()
        try:
            self._thread.join()
        except BaseException:  # Ctrl-C while waiting: stop after the current cell, then let it through
            with self._ready:
                self._stop = True
            self._thread.join()
            raise
        if self._reader is not None:
            self._store.damaged.extend(self._reader.damaged)
            self._store.bad_text += self._reader.bad_text
        if exc_type is None and self._error is not None:
            raise self._error

    def _next(self, position: int) -> tuple[str, str, dict] | None:
        with self._ready:
            while len(self._cells) <= position and not self._stop:
                self._ready.wait()
            return None if self._stop else self._cells[position]

    def _run(self) -> None:
        try:
            self._reader = reader = self._store.sibling()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            self._error = exc
            return
        try:
            position = 0
            while (cell := self._next(position)) is not None:
                key, slug, record = cell
                runs = reader.runs_json_curves(key, host_keys=self._host_keys)
                # curves downsampled (the store keeps every point); a run without a long curve is passed on unparsed
                texts = [thin_run_json(run) if longest > REPORT_POINTS else run for run, longest in runs]
                write(self._root, slug, json.dumps(record, sort_keys=True, default=str), texts)
                position += 1
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            self._error = exc
        finally:
            reader.close()


def write(root: Path, slug: str, record: str, runs: list[str]) -> None:
    """data/<slug>.json: the cell's record with its runs (stored JSON as it is, oldest first). Runs beyond
    DATA_FILE_BYTES go to data/<slug>-runs-2.json, -3, ... ({"runs": [...]}), listed in `more_runs`."""
    chunks: list[list[str]] = [[]]
    size = len(record)
    for run in runs:
        if chunks[-1] and size + len(run) > DATA_FILE_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(run)
        size += len(run) + 2
    more = [f"data/{slug}-runs-{n}.json" for n in range(2, len(chunks) + 1)]
    for name, chunk in zip(more, chunks[1:]):
        (root / name).write_text('{"runs": [' + ", ".join(chunk) + "]}")
    (root / "data" / f"{slug}.json").write_text(
        record[:-1] + ', "more_runs": ' + json.dumps(more) + ', "runs": [' + ", ".join(chunks[0]) + "]}"
    )
