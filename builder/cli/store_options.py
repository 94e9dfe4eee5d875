"""The `--db` option and the matrix file behind it, shared by every verb that reads or records the matrix
(`matrix`, `matrix diff`, `report`, `image build`, `run`): open it or say why not (exit 2), print its data safely."""

from __future__ import annotations

import re
from pathlib import Path

import click

from builder.store.store import DB_ENV_VAR, MatrixStore, StoreError, default_db_path

db_option = click.option(
    "--db",
    "db",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=DB_ENV_VAR,
    default=None,
    help=f"Matrix database file [env {DB_ENV_VAR}; default ./envbuild-matrix.db].",
)

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class DatabaseError(click.ClickException):
    """The matrix file is missing, damaged or not a matrix: bad input, exit 2."""

    exit_code = 2


def note_new_folder(db: Path | None) -> None:
    """Say so on stderr when writing the matrix at `db` will create its folder (never silently)."""
    parent = Path(db or default_db_path()).parent
    if not parent.exists():
        click.echo(
            f"envbuild: creating the folder {plain(parent)} for the matrix database (--db / ${DB_ENV_VAR})", err=True
        )


def open_store(db: Path | None, *, must_exist: bool = False) -> MatrixStore:
    """The store for a command, or a DatabaseError (exit 2) saying why it cannot be opened.

    `must_exist`: for commands that only read: the file is opened read-only, never created or grown.
    """
    if not must_exist:
        note_new_folder(db)
    try:
        return MatrixStore.connect(db or default_db_path(), readonly=must_exist)
    except StoreError as exc:
        raise DatabaseError(str(exc)) from exc


def preflight_store(db: Path | None) -> None:
    """Before long work that records (a build, a run): the matrix file can be used; creates nothing."""
    try:
        MatrixStore.preflight(db or default_db_path())
    except StoreError as exc:
        raise DatabaseError(f"{exc} (checked before starting: nothing was run; or pass --no-record)") from exc


def plain(text: object) -> str:
    """Data made safe for a terminal line: no control characters (escape sequences), no line breaks."""
    return _CONTROL.sub(" ", str(text)).replace("\n", " ")


def warn_damaged(store: MatrixStore) -> None:
    """Name each row the reads skipped (on stderr)."""
    for row in {(r.table, r.row_id, r.column): r for r in store.damaged}.values():
        click.echo(f"warning: skipped {plain(row)}; `envbuild matrix check` lists every such row", err=True)
    if store.bad_text:
        click.echo(
            f"warning: {store.bad_text} stored text value(s) were not UTF-8 (damaged bytes) and are shown"
            " with \ufffd; `envbuild matrix check` lists their rows",
            err=True,
        )
