"""A plain-text table of probe records (status, key value, limit, message) for `python -m workload probe`."""

from __future__ import annotations

_SKIP_KEYS = {"duration_s"}


def key_value(values: dict) -> str:
    """A probe's headline as `name=value`: its first measured error, else its first number or flag; "-" if none."""
    measured = [
        (key, value)
        for key, value in values.items()
        if key not in _SKIP_KEYS and "limit" not in key and isinstance(value, (bool, int, float))
    ]
    ranked = sorted(
        measured, key=lambda kv: (not ("error" in kv[0] and not isinstance(kv[1], bool)), isinstance(kv[1], bool))
    )
    if not ranked:
        return "-"
    key, value = ranked[0]
    return f"{key}={value:.3g}" if isinstance(value, float) else f"{key}={value}"


def limit(values: dict) -> str:
    """The limit the probe compared against (a value whose name says `limit`), or "-"."""
    return next((f"{key}={value}" for key, value in values.items() if "limit" in key), "-")


def _printable(text: str, width: int) -> str:
    """One line, control characters shown as `?`, cut to `width`."""
    text = "".join(c if c.isprintable() else "?" for c in str(text))
    return text if len(text) <= width else text[: width - 3] + "..."


def probe_table(probes: list[dict], message_width: int = 60) -> str:
    """Rows of name, status, key value, limit and message, in aligned columns."""
    rows = [("probe", "status", "key value", "limit", "message")]
    for p in probes:
        values = p.get("values") or {}
        rows.append(
            (p.get("name", "?"), p.get("status", "?"), key_value(values), limit(values), p.get("message") or "")
        )
    rows = [tuple(_printable(cell, message_width) for cell in row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "".join(
        ("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[4]).rstrip() + "\n" for row in rows
    )
