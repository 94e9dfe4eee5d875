"""The report's figures as small SVG files written directly (no plotting library: fast at 10,000 runs).

Each figure has titled panels with labelled axes (units in the label). Text is XML-escaped.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path
from statistics import median

from builder.report.curve_points import downsample

_W, _H = 420, 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 62, 14, 28, 46
_COLORS = ("#0969da", "#bf3989", "#1a7f37")
_MIN_SPAN = 1e-9  # an axis narrower than this (relative to its values) is widened to one unit


class Panel:
    """One plot area: line series and an optional min-max band, over numeric x."""

    def __init__(self, title: str, x_label: str, y_label: str, *, x_ticks: list[tuple[float, str]] | None = None):
        self.title, self.x_label, self.y_label, self.x_ticks = title, x_label, y_label, x_ticks
        self.series: list[tuple[str, list[tuple[float, float]]]] = []
        self.band: list[tuple[float, float, float]] = []
        self.bars: list[tuple[str, float, float]] = []  # (label, before, after)
        self.y_max: float | None = None  # the top of the y axis at least this (e.g. 1 for fractions)

    def svg(self, x0: float) -> str:
        xs = [x for _, pts in self.series for x, _ in pts] + [x for x, _, _ in self.band]
        ys = (
            [y for _, pts in self.series for _, y in pts]
            + [v for _, lo, hi in self.band for v in (lo, hi)]
            + [v for _, b, a in self.bars for v in (b, a)]
        )
        if self.bars:
            xs = [0, len(self.bars)]
        x_lo, x_hi = (min(xs), max(xs)) if xs else (0, 1)
        if not x_hi - x_lo > _MIN_SPAN * max(1.0, abs(x_lo), abs(x_hi)):
            x_lo, x_hi = x_lo - max(1.0, abs(x_lo)), x_hi + max(1.0, abs(x_hi))
        y_ticks = _nice_ticks(min(0.0, min(ys, default=0)), max([*ys, self.y_max or 0]) or 1)
        y_lo, y_hi = y_ticks[0], y_ticks[-1]
        pw, ph = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

        def px(x):
            return x0 + _LEFT + (x - x_lo) / (x_hi - x_lo) * pw

        def py(y):
            return _TOP + ph - (y - y_lo) / (y_hi - y_lo) * ph

        out = [
            f'<text x="{x0 + _W / 2}" y="17" class="t">{escape(self.title)}</text>',
            f'<rect x="{x0 + _LEFT}" y="{_TOP}" width="{pw}" height="{ph}" class="frame"/>',
        ]
        for y in y_ticks:
            out.append(
                f'<line x1="{x0 + _LEFT}" x2="{x0 + _LEFT + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" class="grid"/>'
                f'<text x="{x0 + _LEFT - 5}" y="{py(y) + 4:.1f}" class="yt">{_fmt(y)}</text>'
            )
        ticks = (
            self.x_ticks
            if self.x_ticks is not None
            else [(x, _fmt(x)) for x in _nice_ticks(x_lo, x_hi) if x_lo <= x <= x_hi]
        )
        for x, label in ticks:
            out.append(f'<text x="{px(x):.1f}" y="{_TOP + ph + 15}" class="xt">{escape(label)}</text>')
        out.append(f'<text x="{x0 + _LEFT + pw / 2}" y="{_H - 8}" class="axis">{escape(self.x_label)}</text>')
        out.append(
            f'<text transform="translate({x0 + 14},{_TOP + ph / 2}) rotate(-90)" class="axis">'
            f"{escape(self.y_label)}</text>"
        )
        if self.band:
            upper = " ".join(f"{px(x):.1f},{py(hi):.1f}" for x, _, hi in self.band)
            lower = " ".join(f"{px(x):.1f},{py(lo):.1f}" for x, lo, _ in reversed(self.band))
            out.append(f'<polygon points="{upper} {lower}" class="band"/>')
        for i, (label, pts) in enumerate(self.series):
            color = _COLORS[i % len(_COLORS)]
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.6"/>')
            if len(pts) <= 40:
                out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{color}"/>' for x, y in pts]
            if len(self.series) > 1 or self.band:
                out.append(
                    f'<text x="{x0 + _LEFT + 6}" y="{_TOP + 14 + 14 * i}" class="legend" fill="{color}">'
                    f"{escape(label)}</text>"
                )
        if self.band:
            out.append(
                f'<text x="{x0 + _LEFT + 6}" y="{_TOP + 14 + 14 * len(self.series)}" class="legend"'
                ' fill="#57606a">shaded: lowest to highest run of the day</text>'
            )
        for i, (label, before, after) in enumerate(self.bars):
            for j, value in enumerate((before, after)):
                x, w = px(i + 0.15 + 0.36 * j), pw / len(self.bars) * 0.34
                out.append(
                    f'<rect x="{x:.1f}" y="{py(value):.1f}" width="{w:.1f}" height="{py(y_lo) - py(value):.1f}"'
                    f' fill="{_COLORS[j]}"/><text x="{x + w / 2:.1f}" y="{py(value) - 3:.1f}" class="xt">'
                    f"{value:.2f}</text>"
                )
            out.append(f'<text x="{px(i + 0.5):.1f}" y="{_TOP + ph + 15}" class="xt">{escape(label)}</text>')
        if self.bars:
            out.append(
                f'<text x="{x0 + _LEFT + 6}" y="{_TOP + 14}" class="legend" fill="{_COLORS[0]}">before</text>'
                f'<text x="{x0 + _LEFT + 60}" y="{_TOP + 14}" class="legend" fill="{_COLORS[1]}">after</text>'
            )
        return "\n".join(out)


def training_curves(result: dict, path: Path) -> Path | None:
    """Train loss and grad norm against the optimizer step; None when the run has no curves."""
    curves = (result.get("metrics") or {}).get("curves") or {}
    panels = []
    for name, title, unit in (
        ("train_loss", "train loss", "loss (nats per token)"),
        ("grad_norm", "gradient norm", "grad norm (L2, before clipping)"),
    ):
        points = downsample([(float(s), float(v)) for s, v in curves.get(name) or [] if _finite(v)])
        if points:
            panel = Panel(title, "optimizer step", unit)
            panel.series.append((title, points))
            panels.append(panel)
    return _save(panels, path) if panels else None


def accuracy_before_after(result: dict, path: Path) -> Path | None:
    """Eval accuracy and macro-F1 before and after fine-tuning; None when the run has no eval."""
    metrics = result.get("metrics") or {}
    before, after = metrics.get("eval_before") or {}, metrics.get("eval_after") or {}
    names = [n for n in ("accuracy", "macro_f1") if before.get(n) is not None or after.get(n) is not None]
    if not names:
        return None
    panel = Panel("eval before / after fine-tuning", "metric", "score (fraction, 1 = perfect)", x_ticks=[])
    panel.bars = [(n.replace("_", " "), before.get(n) or 0.0, after.get(n) or 0.0) for n in names]
    panel.y_max = 1.0
    return _save([panel], path)


def throughput_history(runs: list[dict], path: Path) -> Path | None:
    """Samples/s and MFU of a cell's train runs ({at, samples_per_s, mfu}) per day: median line, min-max band."""
    days: dict[str, list[dict]] = {}
    for m in runs:
        if _finite(m.get("samples_per_s")):
            days.setdefault((m.get("at") or "?")[:10], []).append(m)
    if not days:
        return None
    order = sorted(days)
    step = max(1, len(order) // 6)
    one_year = len(order) > 1 and order[0][:4] == order[-1][:4]
    ticks = [(i, d[5:] if one_year else d) for i, d in enumerate(order) if i % step == 0]
    x_label = f"run day ({order[0][:4]}, MM-DD, UTC)" if one_year else "run day (UTC)"
    panels = []
    for key, title, unit, scale in (
        ("samples_per_s", "training throughput", "samples/s", 1),
        ("mfu", "model FLOPs utilization", "MFU (% of peak)", 100),
    ):
        rows = [(i, [scale * m[key] for m in days[d] if _finite(m.get(key))]) for i, d in enumerate(order)]
        rows = [(i, v) for i, v in rows if v]
        if not rows:
            continue
        panel = Panel(f"{title} per day", x_label, unit, x_ticks=ticks)
        panel.series.append(("median of the day's runs", [(i, median(v)) for i, v in rows]))
        if any(len(v) > 1 for _, v in rows):
            panel.band = [(i, min(v), max(v)) for i, v in rows]
        panels.append(panel)
    return _save(panels, path)


def _save(panels: list[Panel], path: Path) -> Path:
    width = _W * len(panels)
    body = "\n".join(p.svg(i * _W) for i, p in enumerate(panels))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{_H}" viewBox="0 0 {width} {_H}"'
        ' font-family="system-ui, sans-serif" font-size="11">\n<style>'
        ".t{font-size:13px;font-weight:600;text-anchor:middle}.axis{text-anchor:middle;fill:#57606a}"
        ".xt{text-anchor:middle;fill:#57606a}.yt{text-anchor:end;fill:#57606a}.legend{font-size:11px}"
        ".frame{fill:#fff;stroke:#d0d7de}.grid{stroke:#eaeef2}.band{fill:#0969da;opacity:.18}</style>\n"
        f'<rect width="{width}" height="{_H}" fill="#fff"/>\n{body}\n</svg>\n'
    )
    return path


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (any finite pair: a range too narrow to tell apart becomes one unit)."""
    if not hi - lo > _MIN_SPAN * max(1.0, abs(lo), abs(hi)):
        hi = lo + max(1.0, abs(lo))
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    return [start + i * step for i in range(int(math.ceil((hi - start) / step - 1e-9)) + 1)]


def _fmt(value: float) -> str:
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:.3g}"
