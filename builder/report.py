"""`envbuild report`: the matrix as a static, offline site (HTML + summary.md + data.json + PNG plots).

Python computes every value here; the templates in `builder/report_templates/` only format them.
The site has no external resources (no CDN, fonts or scripts), so it opens from a file or any host.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from builder import __version__, report_plots
from builder.matrix import VERDICTS, CellSummary, export_data, run_verdict
from builder.store import utc_now

TEMPLATES_DIR = Path(__file__).with_name("report_templates")
_FLAVOR_LABELS = {"rocm": "ROCm", "cuda": "CUDA", "cpu": "CPU"}
_FLAVOR_ORDER = {"rocm": 0, "cuda": 1, "cpu": 2}  # rows: GPU flavors first, the CPU reference last


@dataclass(frozen=True)
class GridEntry:
    key: str
    python: str
    status: str
    failure_class: str | None
    note: str


@dataclass(frozen=True)
class GridRow:
    label: str
    entries: dict[str, list[GridEntry]]  # torch line -> entries (one per Python line)


def build_report(summaries: list[CellSummary], out_dir: Path, *, generated_at: str | None = None) -> Path:
    """Write the site into `out_dir` (created; files of a previous report there are replaced). Returns index.html."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("cells", "plots"):
        shutil.rmtree(out_dir / stale, ignore_errors=True)
    generated_at = generated_at or utc_now()
    env = _environment()
    torch_lines, rows = _grid(summaries)
    counts = {v: sum(s.status == v for s in summaries) for v in VERDICTS}
    common = {"generated_at": generated_at, "version": __version__, "counts": counts}
    shutil.copyfile(TEMPLATES_DIR / "style.css", out_dir / "style.css")
    for summary in summaries:
        page = _cell_page(summary, out_dir)
        (out_dir / "cells").mkdir(exist_ok=True)
        (out_dir / "cells" / f"{summary.key}.html").write_text(
            env.get_template("cell.html.j2").render(page=page, root="../", **common))
    index = out_dir / "index.html"
    index.write_text(env.get_template("index.html.j2").render(
        torch_lines=torch_lines, rows=rows, summaries=summaries, root="", **common))
    (out_dir / "summary.md").write_text(env.get_template("summary.md.j2").render(
        torch_lines=torch_lines, rows=rows, summaries=summaries, **common))
    data = export_data(summaries)
    data["generated_at"] = generated_at
    (out_dir / "data.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return index


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES_DIR), autoescape=select_autoescape(["html.j2"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["num"] = _num
    env.filters["pct"] = lambda v: "-" if v is None else f"{100 * v:.1f}%"
    env.filters["gib"] = lambda v: "-" if v is None else f"{v / 2**30:.2f} GiB"
    env.filters["json"] = lambda v: json.dumps(v, sort_keys=True)
    env.filters["md"] = _markdown_cell
    return env


def _num(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def _markdown_cell(text: str | None) -> str:
    """Text safe inside a Markdown table cell: one line, pipes and angle brackets escaped."""
    text = " ".join((text or "").split())
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in version.split("."))


def _row_label(summary: CellSummary) -> tuple[tuple, str]:
    cell = summary.cell
    label = f"{_FLAVOR_LABELS.get(cell.flavor, cell.flavor)} {cell.accel_version or ''}".strip()
    if cell.arch:
        label += f" · {cell.arch}"
    return (_FLAVOR_ORDER.get(cell.flavor, 1), cell.flavor, _version_key(cell.accel_version or "0"), cell.arch or ""), label


def _grid(summaries: list[CellSummary]) -> tuple[list[str], list[GridRow]]:
    """Rows: accelerator release (× arch); columns: torch line; one entry per Python line in a slot."""
    torch_lines = sorted({s.cell.torch for s in summaries}, key=_version_key)
    rows: dict[tuple, GridRow] = {}
    for s in sorted(summaries, key=lambda s: (_row_label(s)[0], _version_key(s.cell.python))):
        sort_key, label = _row_label(s)
        row = rows.setdefault(sort_key, GridRow(label=label, entries={t: [] for t in torch_lines}))
        row.entries[s.cell.torch].append(GridEntry(s.key, s.cell.python, s.status, s.failure_class, s.note))
    return torch_lines, [rows[k] for k in sorted(rows)]


def _cell_page(summary: CellSummary, out_dir: Path) -> dict:
    """Everything one cell page shows, with its plots drawn into out_dir/plots/."""
    plots_dir = out_dir / "plots"
    latest, train = summary.latest_run, summary.latest_train_run
    plots = {"curves": None, "accuracy": None}
    if train:
        plots["curves"] = report_plots.training_curves(train, plots_dir / f"{summary.key}-curves.png")
        plots["accuracy"] = report_plots.accuracy_before_after(train, plots_dir / f"{summary.key}-accuracy.png")
    train_results = [r["result"] for r in summary.runs if r["result"].get("command") == "train"]
    plots["throughput"] = report_plots.throughput_history(train_results, plots_dir / f"{summary.key}-throughput.png")
    build = summary.latest_build
    image = _latest_image(summary)
    return {
        "summary": summary,
        "cell": summary.cell,
        "latest": _pick(latest, _RUN_KEYS) if latest else None,
        "latest_verdict": run_verdict(latest) if latest else None,
        "train": train,
        "metrics": _metrics((train or {}).get("metrics") or {}),
        "plots": {name: f"plots/{p.name}" if p else None for name, p in plots.items()},
        "versions": sorted(((latest or {}).get("versions") or {}).items()),
        "hardware": _pick((latest or {}).get("hardware") or {}, _HARDWARE_KEYS) if latest else None,
        "image_tag": image.get("tag"),
        "image_digest": image.get("digest"),
        "build": build,
        "host": json.dumps(latest["host"], indent=2, sort_keys=True) if (latest or {}).get("host") else None,
        "probes": [_pick(p, _PROBE_KEYS) for p in (latest or {}).get("probes") or []],
        "history": list(reversed(summary.events)),
        "flips": list(reversed(summary.flips)),
    }


def _latest_image(summary: CellSummary) -> dict:
    """The newest image {tag, digest} a run of this cell used, else the newest one built for it."""
    for row in reversed(summary.runs):
        image = row["result"].get("image") or {}
        if image.get("digest") or image.get("tag"):
            return image
    for build in reversed(summary.builds):
        if build.get("image_digest") or build.get("image_tag"):
            return {"tag": build.get("image_tag"), "digest": build.get("image_digest")}
    return {}


_METRIC_KEYS = ("steps", "samples_per_s", "tokens_per_s", "mfu", "peak_memory_allocated_bytes",
                "peak_memory_reserved_bytes")
_EVAL_KEYS = ("accuracy", "macro_f1", "loss")
_RUN_KEYS = ("run_id", "command", "status", "error_class", "error", "finished_at", "wall_time_s")
_PROBE_KEYS = ("name", "status", "message", "values")
_HARDWARE_KEYS = ("device_type", "vendor", "gpu_name", "arch", "gpu_count")


def _pick(mapping: dict, keys: tuple[str, ...]) -> dict:
    """`mapping` restricted to `keys`, absent ones None (the templates read every key)."""
    return {k: mapping.get(k) for k in keys}


def _metrics(metrics: dict) -> dict:
    picked = _pick(metrics, _METRIC_KEYS)
    for name in ("eval_before", "eval_after"):
        picked[name] = _pick(metrics.get(name) or {}, _EVAL_KEYS)
    return picked
