"""What changed between two cells: versions, probes, throughput and memory, loss curves, side by side.

`profile(result)` flattens one run's comparable facts into sections of `{name: value}` (plus its loss
curve); `compare(a, b)` joins two profiles into rows, differences first in each section, with the ratio
B/A for numbers and, for probes, which side is outside its limit (the probe failed there). Both the
`envbuild matrix diff` command and the report's compare page use these, so they agree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from builder.store import run_config

SECTIONS = ("versions", "learning", "speed", "memory", "probes")
SECTION_TITLES = {
    "versions": "Versions and hardware",
    "learning": "Learning: eval accuracy",
    "speed": "Speed and cost",
    "memory": "Memory",
    "probes": "Probes: measured values",
    "sbom": "SBOM: packages and pins",
}
#: name -> (section, label, unit, kind); kind says how a value reads: num, int, fraction (a %), bytes (GiB), usd
METRICS = {
    "eval_before_accuracy": ("learning", "eval accuracy before training", "fraction correct", "num"),
    "eval_after_accuracy": ("learning", "eval accuracy after training", "fraction correct", "num"),
    "samples_per_s": ("speed", "training throughput", "samples/s", "num"),
    "tokens_per_s": ("speed", "token throughput", "non-pad tokens/s", "num"),
    "mfu": ("speed", "model FLOPs utilization", "% of peak", "fraction"),
    "samples_per_gpu_hour": ("speed", "samples per GPU-hour", "samples", "num"),
    "cost_per_1k_samples": ("speed", "cost per 1,000 samples", "USD, public GPU-hour price", "usd"),
    "wall_time_s": ("speed", "wall time of the run", "s", "num"),
    "steps": ("speed", "optimizer steps", "", "int"),
    "peak_memory_allocated_bytes": ("memory", "peak GPU memory allocated", "GiB", "bytes"),
    "peak_memory_reserved_bytes": ("memory", "peak GPU memory reserved", "GiB", "bytes"),
}


def label(name: str) -> str:
    """A row's label with its unit: "training throughput (samples/s)"; other names as they are."""
    if name not in METRICS:
        return name
    _, text, unit, _ = METRICS[name]
    return f"{text} ({unit})" if unit else text


def value_text(name: str, value) -> str:
    """A value as it reads in its unit: 47.6%, 20.37 GiB, $0.0011, 1,162; "-" for none."""
    if value is None:
        return "-"
    kind = METRICS[name][3] if name in METRICS else ""
    if not _number(value):
        return str(value)
    if kind == "fraction":
        pct = 100 * value
        return f"{pct:.1f}%" if pct == 0 or abs(pct) >= 0.1 else f"{pct:.2g}%"
    if kind == "bytes":
        return f"{value / 2**30:.2f} GiB"
    if kind == "usd":
        return f"${value:.4f}"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"


@dataclass(frozen=True)
class Row:
    section: str
    name: str
    a: object
    b: object
    differs: bool
    ratio: float | None  # b / a for two positive numbers
    out_of_limit: str  # "", "A", "B" or "A and B": where a probe failed
    label: str = ""  # the name with its unit ("training throughput (samples/s)")
    a_text: str = ""  # the values as they read ("47.6%", "20.37 GiB")
    b_text: str = ""


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _flat(prefix: str, values: dict, out: dict) -> None:
    for key, value in sorted((values or {}).items()):
        if key == "duration_s":
            continue
        name = f"{prefix}.{key}"
        if isinstance(value, dict):
            _flat(name, value, out)
        elif isinstance(value, list):
            out[name] = ", ".join(str(v) for v in value)
        else:
            out[name] = value


def profile(result: dict, cost_per_gpu_hour: float | None = None) -> dict:
    """One run's comparable facts: {"run_id", "preset", "versions", "throughput", "probes", "probe_status",
    "train_loss"}. `cost_per_gpu_hour` (a public price) adds samples per GPU-hour's cost per 1k samples."""
    versions = {k: v for k, v in sorted((result.get("versions") or {}).items())}
    hardware = result.get("hardware") or {}
    host = result.get("host") or {}
    image = result.get("image") or {}
    manifest = image.get("manifest") or {}
    gpu = (
        "CPU only"
        if hardware.get("device_type") == "cpu"
        else f"{hardware.get('gpu_name') or '-'} x {hardware.get('gpu_count') or 0}"
    )
    versions |= {
        "gpu": gpu,
        "arch": hardware.get("arch"),
        "kernel": host.get("kernel"),
        "driver": host.get("amdgpu_version") or host.get("driver_version"),
        "image": image.get("tag") or "local (no container)",
        "image digest": image.get("digest"),
        "base image": manifest.get("base_image"),
    }
    metrics = result.get("metrics") or {}
    throughput = {k: metrics.get(k) for k in METRICS if _number(metrics.get(k))}
    throughput["wall_time_s"] = result.get("wall_time_s")
    for when in ("eval_before", "eval_after"):
        accuracy = (metrics.get(when) or {}).get("accuracy")
        throughput[f"{when}_accuracy"] = accuracy
    gpus = max(int(hardware.get("gpu_count") or 0), 1)
    if _number(metrics.get("samples_per_s")) and hardware.get("device_type") == "cuda":
        per_gpu_hour = metrics["samples_per_s"] * 3600 / gpus
        throughput["samples_per_gpu_hour"] = round(per_gpu_hour, 1)
        if cost_per_gpu_hour:
            throughput["cost_per_1k_samples"] = round(1000 * cost_per_gpu_hour / per_gpu_hour, 6)
    probes, status = {}, {}
    for probe in result.get("probes") or []:
        status[probe["name"]] = probe.get("status")
        probes[f"{probe['name']}.status"] = probe.get("status")
        _flat(probe["name"], probe.get("values") or {}, probes)
    curve = ((metrics.get("curves") or {}).get("train_loss")) or []
    measured = {section: {} for section in ("learning", "speed", "memory")}
    for name, value in throughput.items():
        if value is not None:
            measured[METRICS[name][0]][name] = value
    return {
        "run_id": result.get("run_id"),
        "preset": (result.get("config") or {}).get("preset"),
        "configuration": run_config.of_result(result).label,
        "status": result.get("status"),
        "finished_at": result.get("finished_at"),
        "versions": versions,
        **measured,
        "probes": probes,
        "probe_status": status,
        "train_loss": curve,
    }


def compare(a: dict, b: dict) -> list[Row]:
    """Rows for every name in either profile, per section, differences first (then by name)."""
    rows = []
    for section in SECTIONS:
        names = sorted(set(a[section]) | set(b[section]))
        section_rows = []
        for name in names:
            va, vb = a[section].get(name), b[section].get(name)
            ratio = vb / va if _number(va) and _number(vb) and va > 0 and vb >= 0 else None
            out = ""
            if section == "probes":
                probe = name.split(".", 1)[0]
                failed = [side for side, p in (("A", a), ("B", b)) if p["probe_status"].get(probe) == "fail"]
                out = " and ".join(failed)
            section_rows.append(
                Row(
                    section, name, va, vb, va != vb, ratio, out, label(name), value_text(name, va), value_text(name, vb)
                )
            )
        rows += sorted(section_rows, key=lambda r: (not r.differs, r.name))
    return rows


def pick_runs(runs_a: list[dict], runs_b: list[dict], preset: str | None = None) -> tuple[dict, dict]:
    """The results to compare (newest first lists of results): A's newest run (of `preset` when given) and
    B's newest run of the same preset, else B's newest. Raises ValueError naming what is missing."""

    def newest(runs: list[dict], wanted: str | None) -> dict | None:
        return next((r for r in runs if wanted is None or (r.get("config") or {}).get("preset") == wanted), None)

    first = newest(runs_a, preset)
    if first is None:
        raise ValueError(f"cell A has no run{' of preset ' + preset if preset else ''}")
    preset = preset or (first.get("config") or {}).get("preset")
    second = newest(runs_b, preset) or newest(runs_b, None)
    if second is None:
        raise ValueError("cell B has no run")
    return first, second


def as_json(a: dict, b: dict) -> dict:
    """The whole comparison as plain data (`envbuild matrix diff --json`)."""
    return {
        "a": {k: a[k] for k in ("run_id", "preset", "status", "finished_at")},
        "b": {k: b[k] for k in ("run_id", "preset", "status", "finished_at")},
        "rows": [asdict(r) for r in compare(a, b)],
        "train_loss": {"a": a["train_loss"], "b": b["train_loss"]},
    }


def sbom_rows(a: dict[str, str], b: dict[str, str]) -> list[Row]:
    """One row per SBOM component ("<source> <name>[ (<arch>)]" -> version, or sha256 for a pin), in either of two
    SBOMs (builder.sbom.read_components), differences first; "-" where a side lacks it."""
    rows = [
        Row(
            "sbom",
            name,
            a.get(name),
            b.get(name),
            a.get(name) != b.get(name),
            None,
            "",
            name,
            value_text(name, a.get(name)),
            value_text(name, b.get(name)),
        )
        for name in sorted(a.keys() | b.keys())
    ]
    return sorted(rows, key=lambda r: (not r.differs, r.name))
