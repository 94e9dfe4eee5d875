"""The folders a site is built in and swapped through, named so that a later run can tell stale ones.

`envbuild report -o DIR` builds in `.DIR.building-<pid>-<random>` beside DIR and moves the previous
site aside as `.DIR.old-<pid>-<random>` while swapping. A process killed outright (SIGKILL, power loss)
cannot remove them; the next report sweeps every such folder whose process is gone (same host), and
those of an older envbuild that carry no process id. This module imports nothing else from builder.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path

_OWNED = re.compile(r"\.(?P<name>.+)\.(building|old)-(?:(?P<pid>[0-9]+)-)?[0-9A-Za-z_]+")


def building_dir(out_dir: Path) -> Path:
    """A name, not yet taken, beside `out_dir` to build the next site in. The caller makes the folder inside the
    block that removes it, so a Ctrl-C that lands just after the folder appears still removes it."""
    return out_dir.with_name(f".{out_dir.name}.building-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def old_dir(out_dir: Path) -> Path:
    """Where the previous site goes while the new one is swapped in."""
    return out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def sweep_stale(out_dir: Path) -> list[Path]:
    """Remove the building and old folders of `out_dir` left by processes that are gone; returns them."""
    removed = []
    if not out_dir.parent.is_dir():
        return removed
    for path in out_dir.parent.iterdir():
        match = _OWNED.fullmatch(path.name)
        if not match or match["name"] != out_dir.name or path.is_symlink() or not path.is_dir():
            continue
        if match["pid"] and _pid_alive(int(match["pid"])):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True
