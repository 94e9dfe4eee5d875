"""Curves as the report shows them: at most a few hundred points each, evenly spaced, first and last kept.

A run may record one point per optimizer step (up to result_schema.MAX_ITEMS per curve). The store and the
published result.json keep every point; the report's plots and data files hold `downsample`d curves, so a
cell's page and data file stay small whatever the run recorded (`thin_run_json` marks what it thinned).
"""

from __future__ import annotations

import json

#: Points of each curve in a plot or a report data file.
REPORT_POINTS = 500
#: A stored run shorter than this many characters is passed on as it is (its curves cannot be long).
_SHORT_RUN = REPORT_POINTS * 8


def downsample(points: list, limit: int = REPORT_POINTS) -> list:
    """At most `limit` points of a curve, evenly spaced, the first and the last always kept."""
    if len(points) <= limit:
        return points
    step = (len(points) - 1) / (limit - 1)
    return [points[round(i * step)] for i in range(limit)]


def thin_run_json(text: str, limit: int = REPORT_POINTS) -> str:
    """A stored run's JSON with each curve of more than `limit` points downsampled, and
    metrics.curves_points naming each thinned curve's full length; other runs as they are."""
    if len(text) < _SHORT_RUN:
        return text
    run = json.loads(text)
    metrics = run.get("metrics") if isinstance(run, dict) else None
    curves = metrics.get("curves") if isinstance(metrics, dict) else None
    if not isinstance(curves, dict):
        return text
    long = {name: len(points) for name, points in curves.items() if isinstance(points, list) and len(points) > limit}
    if not long:
        return text
    metrics["curves"] = {name: downsample(points, limit) if name in long else points for name, points in curves.items()}
    metrics["curves_points"] = long
    return json.dumps(run, sort_keys=True)
