"""The report's figures never crash on a value the result schema accepts: hypothesis draws
rates and curve values over the schema's whole range (and the subnormal 5e-324 that the schema now refuses),
the real plot functions write real SVG files, and every coordinate in them is a finite number."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings, strategies as st

from builder.report import plots
from builder.store import result_schema
from builder.store.store import InvalidResultError, validate_result
from matrix_fixtures import make_result

NUMBERS = st.one_of(
    st.floats(
        min_value=-result_schema.MAX_NUMBER, max_value=result_schema.MAX_NUMBER, allow_nan=False, allow_infinity=False
    ),
    st.sampled_from([0.0, 5e-324, 1e-308, result_schema.MIN_RATE, 1e15, -1e15, 1.0]),
)


def accepted(metrics: dict) -> dict | None:
    """The metrics as stored when the schema accepts them, else None."""
    try:
        return validate_result(make_result(metrics={**make_result()["metrics"], **metrics}))["metrics"]
    except InvalidResultError:
        return None


def coordinates_are_finite(svg: str) -> bool:
    numbers = re.findall(r'\s(?:x|y|x1|x2|y1|y2|cx|cy|width|height|points)="([^"]*)"', svg)
    return all(math.isfinite(float(v)) for attr in numbers for v in re.split(r"[ ,]+", attr.strip()) if v)


def test_a_subnormal_rate_is_refused_by_the_schema():
    for key in ("samples_per_s", "tokens_per_s", "mfu"):
        assert accepted({key: 5e-324}) is None and accepted({key: -1.0}) is None
        assert accepted({key: 0.0}) is not None and accepted({key: 12.5}) is not None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(NUMBERS, NUMBERS, st.sampled_from(["2026-12-01", "2026-12-02", "2027-01-05"])), min_size=1, max_size=6
    )
)
def test_throughput_history_draws_any_accepted_rates(tmp_path_factory, rows):
    runs = []
    for sps, mfu, day in rows:
        metrics = accepted({"samples_per_s": sps, "mfu": mfu})
        if metrics is not None:
            runs.append({"at": f"{day}T10:00:00Z", "samples_per_s": metrics["samples_per_s"], "mfu": metrics["mfu"]})
    path = plots.throughput_history(runs, tmp_path_factory.mktemp("p") / "t.svg")
    if runs:
        assert path is not None and coordinates_are_finite(path.read_text())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**62), NUMBERS), min_size=1, max_size=8))
def test_training_curves_draw_any_accepted_curve(tmp_path_factory, points):
    metrics = accepted({"curves": {"train_loss": [list(p) for p in points]}})
    if metrics is None:
        return
    path = plots.training_curves({"metrics": metrics}, tmp_path_factory.mktemp("p") / "c.svg")
    assert path is not None and coordinates_are_finite(path.read_text())


@pytest.mark.parametrize("lo, hi", [(0.0, 5e-324), (0.0, 0.0), (-1e15, 1e15), (1e15, 1e15), (0.0, 1e-300), (2.0, 1.0)])
def test_nice_ticks_cover_any_finite_range(lo, hi):
    ticks = plots._nice_ticks(lo, hi)
    assert len(ticks) >= 2 and all(math.isfinite(t) for t in ticks) and ticks[0] <= lo
