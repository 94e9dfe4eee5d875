"""The report's figures, drawn with matplotlib's Agg backend into PNG files (no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

_DPI = 96


def training_curves(result: dict, path: Path) -> Path | None:
    """Train loss and grad norm against the optimizer step; None when the run has no curves."""
    curves = ((result.get("metrics") or {}).get("curves") or {})
    panels = [(name, curves.get(name) or []) for name in ("train_loss", "grad_norm")]
    if not any(points for _, points in panels):
        return None
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), dpi=_DPI)
    for ax, (name, points) in zip(axes, panels):
        if points:
            steps, values = zip(*points)
            ax.plot(steps, values, marker="." if len(points) < 60 else None, linewidth=1.4)
        ax.set_title(name.replace("_", " "))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    return _save(fig, path)


def accuracy_before_after(result: dict, path: Path) -> Path | None:
    """Eval accuracy and macro-F1 before and after fine-tuning; None when the run has no eval."""
    metrics = result.get("metrics") or {}
    before, after = metrics.get("eval_before") or {}, metrics.get("eval_after") or {}
    names = [n for n in ("accuracy", "macro_f1") if before.get(n) is not None or after.get(n) is not None]
    if not names:
        return None
    fig, ax = plt.subplots(figsize=(4.5, 3.2), dpi=_DPI)
    width = 0.38
    xs = range(len(names))
    for offset, label, values in ((-width / 2, "before", before), (width / 2, "after", after)):
        heights = [values.get(n) or 0.0 for n in names]
        bars = ax.bar([x + offset for x in xs], heights, width, label=label)
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.set_xticks(list(xs), [n.replace("_", " ") for n in names])
    ax.set_ylim(0, 1.1)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title("eval before / after")
    return _save(fig, path)


def throughput_history(results: list[dict], path: Path) -> Path | None:
    """Samples/s and MFU over a cell's train runs, oldest first; None when no run measured throughput."""
    points = [(i, (r.get("metrics") or {})) for i, r in enumerate(results, 1)
              if (r.get("metrics") or {}).get("samples_per_s") is not None]
    if not points:
        return None
    mfu = [(i, 100 * m["mfu"]) for i, m in points if m.get("mfu") is not None]
    panels = [("samples/s", [(i, m["samples_per_s"]) for i, m in points])] + ([("MFU %", mfu)] if mfu else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.2), dpi=_DPI, squeeze=False)
    for ax, (name, series) in zip(axes[0], panels):
        ax.plot([i for i, _ in series], [v for _, v in series], marker="o")
        ax.set_title(f"{name} per run")
        ax.set_xlabel("run (oldest first)")
        ax.set_xticks(range(1, len(results) + 1, max(1, len(results) // 10)))
        ax.set_xlim(0.5, len(results) + 0.5)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path
