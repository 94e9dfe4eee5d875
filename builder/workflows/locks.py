"""`envbuild lock`: the dependency locks under recipes/locks/ (one per torch line and Python) written where missing
or stale, checked offline (`check`), or resolved again as of their own date and compared (`verify`). Each lock's
outcome is said as a line as it is reached (`say`; `progress` for a resolution about to start)."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from builder.plan import recipes as recipe_data
from builder.plan.lock import keys, parse, read, resolve_lock, write_lock
from builder.plan.lock_names import LOCKS_DIR, LockError, lock_path
from builder.plan.recipes import RecipeError
from builder.slug import terminal_safe
from builder.workflows.errors import BadInput, BadRequest


@dataclass(frozen=True)
class LockRequest:
    torch_line: str | None  # only this torch line (None: all)
    python: str | None  # only this Python (None: all of the line's)
    check: bool  # offline: every selected lock exists and matches the recipes
    verify: bool  # resolve each again as of its own exclude-newer date and compare
    refresh: bool  # resolve again even where up to date
    exclude_newer: str | None  # the index as of this date (None: today 00:00 UTC)
    site: Path | None  # a site's recipe folder over the packaged one


@dataclass(frozen=True)
class LockOutcome:
    bad: int  # locks missing, stale or different (check, verify) and lock files no cell uses (check)


def _today() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT00:00:00Z")


def update_locks(request: LockRequest, say: Callable[[str], None], progress: Callable[[str], None]) -> LockOutcome:
    """Each selected lock written, checked or verified, in order. Recipe data that does not validate and a lock that
    cannot be read or resolved are BadInput (exit 2; under `check`, a bad lock is a line and counts as bad); a
    selection no cell has is a BadRequest."""
    try:
        recipes = recipe_data.load(site=request.site)
        selected = [k for k in keys(recipes) if request.torch_line in (None, k[0]) and request.python in (None, k[1])]
    except RecipeError as exc:  # bad recipe data is bad input: exit code 2
        raise BadInput(str(exc)) from exc
    if not selected:
        known = ", ".join(f"{line}/{py}" for line, py in keys(recipes))
        raise BadRequest(
            f"no cell has torch {request.torch_line or 'any'} with Python {request.python or 'any'}; "
            f"known torch/Python pairs: {known}"
        )
    date = request.exclude_newer or _today()
    bad = 0
    for line, py in selected:
        name = lock_path(recipes, line, py).relative_to(recipes.root.parent)
        try:
            bad += _one_lock(recipes, line, py, name, request, date, say, progress)
        except LockError as exc:
            if not request.check:
                raise BadInput(terminal_safe(str(exc))) from exc
            say(f"{exc.kind:<8} {name}: {terminal_safe(str(exc))}")
            bad += 1
    if request.check and request.torch_line is None and request.python is None:
        bad += _unused(recipes, say)
    return LockOutcome(bad)


def _one_lock(recipes, line: str, py: str, name, request: LockRequest, date: str, say, progress) -> int:
    """Check, verify or (re)write one lock; 1 when it differs (verify), else 0. LockError passes through."""
    if request.check:
        read(recipes, line, py)
        say(f"ok       {name}")
        return 0
    if request.verify:
        return _verify(recipes, line, py, name, say)
    if not request.refresh:
        try:
            read(recipes, line, py)
            say(f"ok       {name} (up to date; --refresh resolves it again)")
            return 0
        except LockError as exc:
            if exc.kind == "invalid":
                raise
    progress(f"resolve  {name} (exclude-newer {date}) ...")
    start = time.monotonic()
    text = resolve_lock(recipes, line, py, date)
    path = write_lock(recipes, line, py, text)
    count = len(parse(text, str(path)).entries("stack"))
    say(f"wrote    {name}: {count} packages ({time.monotonic() - start:.1f} s)")
    return 0


def _unused(recipes, say) -> int:
    """Lock files no cell uses (a torch line or Python removed from the recipes): named, counted as bad."""
    wanted = {lock_path(recipes, line, py).name for line, py in keys(recipes)}
    folder = recipes.root / LOCKS_DIR
    unused = sorted(p.name for p in folder.glob("*.txt") if p.name not in wanted) if folder.is_dir() else []
    for name in unused:
        say(f"unused   {LOCKS_DIR}/{terminal_safe(name)}: no cell has its torch line and Python; delete it")
    return len(unused)


def _verify(recipes, line: str, python: str, name, say) -> int:
    """Resolve the lock again as of its own date; 1 when the result differs."""
    committed = read(recipes, line, python)
    date = committed.header.get("exclude-newer", "")
    fresh = parse(resolve_lock(recipes, line, python, date), f"{name} (re-resolved)")
    if fresh.sha256 == committed.sha256:
        say(f"same     {name} (re-resolved as of {date})")
        return 0
    for section in ("venv", "stack"):
        old, new = committed.versions(section), fresh.versions(section)
        for pkg in sorted(set(old) | set(new)):
            if old.get(pkg) != new.get(pkg):
                say(f"  [{section}] {pkg}: locked {old.get(pkg, '-')}, resolves to {new.get(pkg, '-')}")
        hashes = {e.name: e.hashes for e in committed.entries(section)}
        for entry in fresh.entries(section):
            if entry.name in hashes and old.get(entry.name) == entry.version and hashes[entry.name] != entry.hashes:
                say(f"  [{section}] {entry.name} {entry.version}: the index serves other files than locked")
    say(f"DIFFERS  {name} (re-resolved as of {date})")
    return 1
