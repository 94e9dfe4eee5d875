"""The matrix file of the verbs that read or record it (`--db`, default ./envbuild-matrix.db): opened, or refused with
why (BadInput, exit code 2); checked before long work that records (`preflight`); and the rows its reads skipped, as
warnings (`damage_warnings`)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from builder.paths import DB_ENV_VAR, default_db_path
from builder.slug import plain
from builder.store.store import MatrixStore, StoreError
from builder.workflows.errors import BadInput


def db_path(db: Path | None) -> Path:
    """The matrix file `--db` names, else the default one."""
    return Path(db or default_db_path())


def new_folder_note(db: Path | None) -> str | None:
    """The line that says writing the matrix at `db` creates its folder (never silently), or None."""
    parent = db_path(db).parent
    if parent.exists():
        return None
    return f"envbuild: creating the folder {plain(parent)} for the matrix database (--db / ${DB_ENV_VAR})"


def open_store(
    db: Path | None, *, must_exist: bool = False, notify: Callable[[str], None] | None = None
) -> MatrixStore:
    """The store, or BadInput saying why it cannot be opened. `must_exist`: for reads only; the file is opened
    read-only, never created or grown. Otherwise a folder the open creates is said to `notify`."""
    if not must_exist and notify is not None and (note := new_folder_note(db)):
        notify(note)
    try:
        return MatrixStore.connect(db_path(db), readonly=must_exist)
    except StoreError as exc:
        raise BadInput(str(exc)) from exc


def preflight(db: Path | None) -> None:
    """Before long work that records (a build): the matrix file can be used; creates nothing."""
    try:
        MatrixStore.preflight(db_path(db))
    except StoreError as exc:
        raise BadInput(f"{exc} (checked before starting: nothing was run; or pass --no-record)") from exc


def damage_warnings(store: MatrixStore) -> list[str]:
    """A line for each row the store's reads skipped, and one for text that was not UTF-8."""
    lines = [
        f"warning: skipped {plain(row)}; `envbuild matrix check` lists every such row"
        for row in {(r.table, r.row_id, r.column): r for r in store.damaged}.values()
    ]
    if store.bad_text:
        lines.append(
            f"warning: {store.bad_text} stored text value(s) were not UTF-8 (damaged bytes) and are shown"
            " with \ufffd; `envbuild matrix check` lists their rows"
        )
    return lines
