"""Recipe text with named placeholders, filled per cell: `{suffix}` (the release's wheel index suffix) in a
flavor's `wheel_index` and `local_version`, `{version}` (the release) in its `source_local_version`, `{arch}` and
`{torch}` in a pip-ROCm release's requirements.

Only the names a field defines may stand in braces, checked when the recipes load (builder.plan.recipe_grammar);
`fill` replaces those and nothing else. No format spec, no attribute or index access, no other brace: str.format
would run all of those on data (a width of 60,000,000 renders a 120 MB Dockerfile).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_PLACEHOLDER = re.compile(r"\{([a-z]+)\}")


def check(template: str, names: Iterable[str]) -> None:
    """ValueError when `template` holds a brace that is not one of the placeholders `names`."""
    names = tuple(names)
    rest = _PLACEHOLDER.sub(lambda m: "" if m[1] in names else m[0], template)
    if "{" in rest or "}" in rest:
        allowed = ", ".join("{" + name + "}" for name in names) or "none"
        raise ValueError(f"{template[:80]!r} holds braces that are no placeholder of this field (it takes {allowed})")


def fill(template: str, **values: str) -> str:
    """`template` with each placeholder replaced by its value, in one pass (a value is never filled in again);
    `template` is one `check` passed and `values` names every placeholder it holds."""
    return _PLACEHOLDER.sub(lambda m: values[m[1]], template)
