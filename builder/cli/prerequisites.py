"""What the user must fix before `envbuild run` can work: a missing prerequisite (no Docker engine, no workload
packages). Exit 2, like bad input. The other verbs' workflows say so with builder.workflows.errors.BadInput."""

from __future__ import annotations

import click


class MissingPrerequisite(click.ClickException):
    """What is missing and how to get it; nothing was run or recorded."""

    exit_code = 2
