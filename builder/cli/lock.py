"""`envbuild lock`: resolve, check and re-verify the dependency locks under recipes/locks/."""

from __future__ import annotations

import sys

import click

from builder.cli import site_recipes
from builder.cli.errors import workflow_errors


@click.command("lock")
@click.option("--torch", "torch_line", default=None, metavar="LINE", help="Only this torch line (default: all).")
@click.option("--python", default=None, metavar="X.Y", help="Only this Python (default: all of the line's).")
@click.option(
    "--check", is_flag=True, help="Offline: exit 1 unless every selected lock exists and matches the recipes."
)
@click.option(
    "--verify",
    is_flag=True,
    help="Resolve each selected lock again as of its own exclude-newer date and exit 1 on any difference "
    "(needs PyPI): the lock is reproducible and PyPI still serves the same files.",
)
@click.option(
    "--refresh",
    is_flag=True,
    help="Resolve again even where the lock is up to date (takes newer releases "
    "of unpinned dependencies, as of --exclude-newer).",
)
@click.option(
    "--exclude-newer",
    default=None,
    metavar="DATE",
    help="Resolve with what the index had at DATE (2026-12-02T00:00:00Z; default: today 00:00 UTC).",
)
@workflow_errors()
def lock(
    torch_line: str | None, python: str | None, check: bool, verify: bool, refresh: bool, exclude_newer: str | None
) -> None:
    """Resolve the dependency locks (recipes/locks/): every distribution an image installs, with hashes.

    One lock per torch line and Python, resolved with uv against PyPI (set UV_INDEX_URL for a mirror; a proxy's
    CA via SSL_CERT_FILE) for x86_64 Linux. Without flags, writes the locks that are missing or stale and leaves
    the rest. `render` reads them offline and refuses a missing or stale one; images install them with
    pip --require-hashes. Exit codes: 0 fine, 1 a lock is missing/stale/different (--check, --verify), 2 bad
    input or a resolution that failed.
    """
    if check and (verify or refresh):
        raise click.UsageError("--check is offline and writes nothing; drop --verify/--refresh")
    from builder.workflows.locks import LockRequest, update_locks

    request = LockRequest(torch_line, python, check, verify, refresh, exclude_newer, site_recipes.folder())
    if update_locks(request, say=click.echo, progress=lambda line: click.echo(line, err=True)).bad:
        sys.exit(1)
