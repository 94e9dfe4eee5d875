"""The `--db` option, shared by every verb that reads or records the matrix (`matrix`, `matrix diff`, `report`,
`image`, `run`, `slurm`), and the note that writing the matrix will create its folder."""

from __future__ import annotations

from pathlib import Path

import click

from builder.paths import DB_ENV_VAR

db_option = click.option(
    "--db",
    "db",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=DB_ENV_VAR,
    default=None,
    help=f"Matrix database file [env {DB_ENV_VAR}; default ./envbuild-matrix.db].",
)


def note_new_folder(db: Path | None) -> None:
    """Say so on stderr when writing the matrix at `db` will create its folder (never silently)."""
    from builder.workflows.matrix_file import new_folder_note  # the store: only when a verb writes the matrix

    if note := new_folder_note(db):
        click.echo(note, err=True)
