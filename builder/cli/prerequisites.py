"""A missing prerequisite (no Docker engine, no workload packages): the user's to fix, so exit 2, like bad input."""

from __future__ import annotations

import click


class MissingPrerequisite(click.ClickException):
    """What is missing and how to get it; nothing was run or recorded."""

    exit_code = 2
