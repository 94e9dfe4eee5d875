"""`envbuild lock`: resolve, check and re-verify the dependency locks under recipes/locks/."""

from __future__ import annotations

import datetime as dt
import sys
import time

import click

from builder.cli import site_recipes
from builder.slug import terminal_safe
from builder.plan.lock import keys, parse, read, resolve_lock, write_lock
from builder.plan.lock_names import LOCKS_DIR, LockError, lock_path
from builder.plan.recipes import RecipeError


class LockFailed(click.ClickException):
    """A lock that cannot be read or resolved: exit code 2, as for other bad input."""

    exit_code = 2


def _today() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT00:00:00Z")


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
    try:
        recipes = site_recipes.load()
        selected = [k for k in keys(recipes) if (torch_line in (None, k[0])) and (python in (None, k[1]))]
    except RecipeError as exc:  # bad recipe data is bad input: exit code 2, as the docstring says
        raise LockFailed(str(exc)) from exc
    if not selected:
        known = ", ".join(f"{line}/{py}" for line, py in keys(recipes))
        raise click.UsageError(
            f"no cell has torch {torch_line or 'any'} with Python {python or 'any'}; known torch/Python pairs: {known}"
        )
    date = exclude_newer or _today()
    bad = 0
    for line, py in selected:
        name = lock_path(recipes, line, py).relative_to(recipes.root.parent)
        try:
            if check:
                read(recipes, line, py)
                click.echo(f"ok       {name}")
                continue
            if verify:
                bad += _verify(recipes, line, py, name)
                continue
            if not refresh:
                try:
                    read(recipes, line, py)
                    click.echo(f"ok       {name} (up to date; --refresh resolves it again)")
                    continue
                except LockError as exc:
                    if exc.kind == "invalid":
                        raise
            click.echo(f"resolve  {name} (exclude-newer {date}) ...", err=True)
            start = time.monotonic()
            text = resolve_lock(recipes, line, py, date)
            path = write_lock(recipes, line, py, text)
            count = len(parse(text, str(path)).entries("stack"))
            click.echo(f"wrote    {name}: {count} packages ({time.monotonic() - start:.1f} s)")
        except LockError as exc:
            if check:
                click.echo(f"{exc.kind:<8} {name}: {terminal_safe(str(exc))}")
                bad += 1
                continue
            raise LockFailed(terminal_safe(str(exc))) from exc
    if check and torch_line is None and python is None:
        bad += _unused(recipes)
    if bad:
        sys.exit(1)


def _unused(recipes) -> int:
    """Lock files no cell uses (a torch line or Python removed from the recipes): named, counted as bad."""
    wanted = {lock_path(recipes, line, py).name for line, py in keys(recipes)}
    folder = recipes.root / LOCKS_DIR
    unused = sorted(p.name for p in folder.glob("*.txt") if p.name not in wanted) if folder.is_dir() else []
    for name in unused:
        click.echo(f"unused   {LOCKS_DIR}/{terminal_safe(name)}: no cell has its torch line and Python; delete it")
    return len(unused)


def _verify(recipes, line: str, python: str, name) -> int:
    """Resolve the lock again as of its own date; 1 when the result differs."""
    committed = read(recipes, line, python)
    date = committed.header.get("exclude-newer", "")
    fresh = parse(resolve_lock(recipes, line, python, date), f"{name} (re-resolved)")
    if fresh.sha256 == committed.sha256:
        click.echo(f"same     {name} (re-resolved as of {date})")
        return 0
    for section in ("venv", "stack"):
        old, new = committed.versions(section), fresh.versions(section)
        for pkg in sorted(set(old) | set(new)):
            if old.get(pkg) != new.get(pkg):
                click.echo(f"  [{section}] {pkg}: locked {old.get(pkg, '-')}, resolves to {new.get(pkg, '-')}")
        hashes = {e.name: e.hashes for e in committed.entries(section)}
        for entry in fresh.entries(section):
            if entry.name in hashes and old.get(entry.name) == entry.version and hashes[entry.name] != entry.hashes:
                click.echo(f"  [{section}] {entry.name} {entry.version}: the index serves other files than locked")
    click.echo(f"DIFFERS  {name} (re-resolved as of {date})")
    return 1
