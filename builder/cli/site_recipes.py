"""The site's recipe folder the group parsed (`envbuild --recipes DIR`, or ENVBUILD_RECIPES=DIR): read once, at
the door, and passed down as a value in each verb's request; nothing below the CLI reads the environment for it."""

from __future__ import annotations

from pathlib import Path

import click


def folder() -> Path | None:
    """The folder `--recipes` (or its environment variable) named for this command, or None."""
    ctx = click.get_current_context(silent=True)
    return ctx.find_root().params.get("site_recipes")  # builder.cli.main's --recipes if ctx is not None else None
