"""What the user must fix before envbuild can work: a missing prerequisite (no Docker engine, no workload packages) or
recipe data that does not validate. Exit 2, like bad input."""

from __future__ import annotations

import click


class MissingPrerequisite(click.ClickException):
    """What is missing and how to get it; nothing was run or recorded."""

    exit_code = 2


class BadRecipeData(click.ClickException):
    """The recipe data does not validate (a site's --recipes folder, or an edited recipes/): exit 2."""

    exit_code = 2

    def __init__(self, detail: object) -> None:
        super().__init__(f"recipe data is invalid: {detail}")
