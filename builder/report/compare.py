"""The report's compare page: any two cells side by side (versions, throughput and memory, probes, loss curves).

Python flattens each cell's newest run per preset with `builder.report.diff.profile` (the same facts
`envbuild matrix diff` compares) and writes each cell's profiles to its own script, compare/<slug>.js:
`envbuildCompare.register({"key": ..., "profiles": [...]});`, the slug from `builder.slug`.
compare.html holds only the cell keys and those file names. compare.js adds a cell's script to the page
when the cell is picked (a <script src>, not fetch: the site works from file:// too), then joins the two
chosen profiles, so no page carries every cell's runs. The JSON is escaped for a script (no `<`, `>` or `&`
survive; json.dumps writes no other non-ASCII character), and compare.js writes every value as text, never markup.
"""

from __future__ import annotations

import json
from pathlib import Path

from jinja2 import Environment
from markupsafe import Markup

from builder.report import diff, gpu_prices, page_bounds
from builder.store import run_config
from builder.report.curve_points import downsample
from builder.slug import safe_slug
from builder.store.summary import CellSummary


#: Points of each loss curve embedded per profile (evenly spaced, first and last kept): the page stays small.
CURVE_POINTS = 60
#: The folder of the per-cell scripts, and what each holds around its one JSON object.
FOLDER = "compare"
PREFIX, SUFFIX = "envbuildCompare.register(", ");\n"


def profiles(newest: dict[str, list[dict]], summaries: list[CellSummary]) -> dict[str, list[dict]]:
    """cell key -> the newest run's profile of each preset, the verdict configuration's first (then newest first),
    loss curves downsampled; `newest`: `MatrixStore.newest_per_preset()`."""
    out: dict[str, list[dict]] = {}
    for summary in summaries:
        for result in sorted(newest.get(summary.key, []), key=lambda r: not run_config.of_result(r).decides):
            price = gpu_prices.price_for(result)
            profile = diff.profile(result, price.usd_per_gpu_hour if price else None)
            bounded = {
                **profile,
                "train_loss": downsample(profile["train_loss"], CURVE_POINTS),
                "versions": page_bounds.mapping(profile["versions"]),
                "probes": page_bounds.mapping(profile["probes"]),
            }
            out.setdefault(summary.key, []).append(_rounded(bounded))
    return out


def _rounded(value):
    """Floats to 4 significant digits (what the page shows), everywhere in a profile."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def script_json(value) -> Markup:
    """JSON safe inside a <script> element or a script file (a JavaScript expression too)."""
    text = json.dumps(value, sort_keys=True, default=str)
    return Markup(text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e"))


def script_file(key: str, cell_profiles: list[dict]) -> str:
    """The text of compare/<slug>.js: one call that hands the cell's profiles to compare.js."""
    return f"{PREFIX}{script_json({'key': key, 'profiles': cell_profiles})}{SUFFIX}"


def write(
    root: Path, html: Environment, newest: dict[str, list[dict]], summaries: list[CellSummary], common: dict
) -> None:
    """compare.html and compare/<slug>.js; `newest`: `MatrixStore.newest_per_preset()`."""
    data = profiles(newest, summaries)
    keys = [s.key for s in summaries if s.key in data]
    files = {key: f"{FOLDER}/{safe_slug(key)}.js" for key in keys}
    (root / FOLDER).mkdir()
    for key in keys:
        (root / files[key]).write_text(script_file(key, data[key]))
    (root / "compare.html").write_text(
        html.get_template("compare.html.j2").render(
            keys=keys,
            first=keys[0] if keys else "",
            second=keys[1] if len(keys) > 1 else "",
            files=script_json(files),
            sections=[(s, diff.SECTION_TITLES[s]) for s in diff.SECTIONS],
            metrics=script_json({name: [diff.label(name), kind] for name, (_, _, _, kind) in diff.METRICS.items()}),
            root="",
            **common,
        )
    )
