"""The report's compare page: any two cells side by side (versions, throughput and memory, probes, loss curves).

Python flattens each cell's newest run per preset with `builder.matrix.diff.profile` (the same facts
`envbuild matrix diff` compares) and embeds them in compare.html as JSON; compare.js joins the two chosen
profiles in the browser. Embedded, not fetched: the site works from file:// too. The JSON is escaped for
a <script> element (no `<`, `>` or `&` survive), and compare.js writes every value as text, never markup.
"""

from __future__ import annotations

import json
from pathlib import Path

from jinja2 import Environment
from markupsafe import Markup

from builder.matrix import diff, gpu_prices, run_config
from builder.matrix.store import MatrixStore
from builder.matrix.summary import CellSummary, completed


def profiles(store: MatrixStore, summaries: list[CellSummary]) -> dict[str, list[dict]]:
    """cell key -> one profile per configuration ("preset · model"), the verdict configuration first, then the
    newest: each configuration's latest completed run (else its newest run), so an interrupted run never
    blanks a comparison."""
    out: dict[str, list[dict]] = {}
    for summary in summaries:
        chosen: dict[str, dict] = {}
        for row in reversed(store.runs(summary.key)):
            result = row["result"]
            configuration = run_config.of_result(result).label
            if configuration not in chosen or (completed(result) and not completed(chosen[configuration])):
                chosen[configuration] = result
        order = sorted(chosen, key=lambda c: c != run_config.VERDICT_LABEL)
        for configuration in order:
            result = chosen[configuration]
            price = gpu_prices.price_for(result)
            out.setdefault(summary.key, []).append(diff.profile(result, price.usd_per_gpu_hour if price else None))
    return out


def script_json(value) -> Markup:
    """JSON safe inside a <script type="application/json"> element."""
    text = json.dumps(value, sort_keys=True, default=str)
    return Markup(text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e"))


def write(root: Path, html: Environment, store: MatrixStore, summaries: list[CellSummary], common: dict) -> None:
    data = profiles(store, summaries)
    keys = [s.key for s in summaries if s.key in data]
    (root / "compare.html").write_text(html.get_template("compare.html.j2").render(
        keys=keys, first=keys[0] if keys else "", second=keys[1] if len(keys) > 1 else "",
        profiles=script_json(data), sections=[(s, diff.SECTION_TITLES[s]) for s in diff.SECTIONS],
        metrics=script_json({name: [diff.label(name), kind] for name, (_, _, _, kind) in diff.METRICS.items()}),
        root="", **common))
