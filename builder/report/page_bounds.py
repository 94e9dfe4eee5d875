"""What one report page shows of a run, bounded whatever the run holds: each value at most MAX_TEXT
characters, each table at most a fixed number of rows. The cell's data file and the store keep everything;
a clipped value or table says so and where the rest is.
"""

from __future__ import annotations

from markupsafe import Markup

#: Characters of one value on a page (a longer one ends in "… (N characters; the data file has all)").
MAX_TEXT = 2000
#: Characters of one key or value in a table of rows (versions, host, probe values).
MAX_CELL = 200
#: Rows of one such table, and probes of one run, on a page.
MAX_ROWS = 60
MAX_PROBE_ROWS = 20
MAX_PROBES = 30


def clip(value, limit: int = MAX_TEXT):
    """The HTML environment's `finalize`: a string longer than `limit` is cut, saying how long it was."""
    if isinstance(value, str) and not isinstance(value, Markup) and len(value) > limit:
        return f"{value[:limit]}… ({len(value)} characters; the cell's data file has all)"
    return value


def rows(pairs: list[tuple[str, str]], limit: int = MAX_ROWS) -> list[tuple[str, str]]:
    """At most `limit` (key, value) rows, each cut to MAX_CELL characters; a last row counts those left out."""
    shown = [(clip(str(k), MAX_CELL), clip(str(v), MAX_CELL)) for k, v in pairs[:limit]]
    if len(pairs) > limit:
        shown.append(("…", f"{len(pairs) - limit} more rows in the cell's data file"))
    return shown


def probes(items: list[dict]) -> list[dict]:
    """At most MAX_PROBES probes, each with at most MAX_PROBE_ROWS value rows."""
    shown = [{**p, "values": rows(p["values"], MAX_PROBE_ROWS)} for p in items[:MAX_PROBES]]
    if len(items) > MAX_PROBES:
        shown.append(
            {
                "name": "…",
                "status": "",
                "message": f"{len(items) - MAX_PROBES} more probes in the cell's data file",
                "values": [],
            }
        )
    return shown


def mapping(values: dict, limit: int = 400) -> dict:
    """At most `limit` entries of a flat {name: value} (the compare page's versions and probe values), names and
    text values cut to MAX_CELL characters; an entry "…" counts those left out."""
    shown = {clip(str(k), MAX_CELL): clip(v, MAX_CELL) for k, v in list(values.items())[:limit]}
    if len(values) > limit:
        shown["…"] = f"{len(values) - limit} more in the cell's data file"
    return shown
