"""`envbuild report`: the matrix as a static, offline site (HTML + summary.md + JSON data + SVG plots).

Python computes every value here; the templates in `builder/report/report_templates/` only format them
(HTML autoescaped; Markdown escaped by the environment's `finalize`, so no value reaches either raw).
The site is built in a temporary folder next to the target and swapped in at the end: a failure
leaves the previous site whole. Every file name comes from `builder.slug.safe_slug`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from builder import __version__
from builder.paths import PROVENANCE_ENVELOPE, PROVENANCE_FILE, SBOM_FILE
from builder.store import attempt_files, provenance, run_config
from builder.report import compare as report_compare, diff, gpu_answers, gpu_prices, ladder as cell_ladder
from builder.report import plots as report_plots, site_folders, vendor_support
from builder.report import data_files, matrix_reads, page_bounds
from builder.slug import safe_slug
from builder.known_secrets import known_secrets, scrub_tail
from builder.plan import gpu_names, image_origin
from builder.store.store import MatrixStore, utc_now
from builder.store.summary import VERDICTS, CellSummary, configuration_line, run_verdict, summary_line, summary_record

TEMPLATES_DIR = Path(__file__).with_name("report_templates")
MARKER = ".envbuild-report"  # marks a folder as a report this command may replace
_PROVENANCE_FILTER = {
    "ci": "this project's CI",
    "contributed": "contributed, signed",
    "unsigned": "unsigned",
    "revoked": "revoked signature",
    "none": "no run",
}
HISTORY_ROWS = 50  # history rows on a cell page; the full history is in data/<cell>.json
#: Newest full results per cell the pages parse (latest run, latest train run, latest image); history rows
#: come from the store's columns, so a report never parses every stored result.
PAGE_RUNS = 3
#: Cells per page of the index (about 2 kB each): 5,000 cells give 18 pages of about 600 kB, never one 10 MB page.
INDEX_PAGE_CELLS = 300
LOG_TAIL_BYTES = 256 * 1024
#: The most an SBOM or provenance file copied into the site may weigh (a ROCm image's SBOM is about 1 MB).
EVIDENCE_BYTES = 16 * 1024 * 1024
PUBLIC_HOST_KEYS = ("os", "kernel", "amdgpu_version", "gpu_archs")
_FLAVOR_LABELS = {"rocm": "ROCm", "cuda": "CUDA", "cpu": "CPU"}
_FLAVOR_ORDER = {"rocm": 0, "cuda": 1, "cpu": 2}  # rows: GPU flavors first, the CPU reference last


class ReportError(Exception):
    """The report cannot be written where asked; the message says why (nothing was changed)."""


@dataclass(frozen=True)
class IndexEntry:
    """One cell as the index shows it (grid entry and table row)."""

    key: str
    slug: str
    flavor: str
    accel: str
    release: str  # the release filter's value: "rocm 6.2", "cuda 13.0", "cpu"
    arch: str
    torch: str
    python: str
    status: str
    failure_class: str | None
    note: str
    last_at: str
    hardware: str
    samples_per_s: float | None
    mfu: float | None
    samples_per_gpu_hour: float | None
    cost_per_1k: str  # "$0.0011 (price of 2026-03-17)" where a public GPU-hour price is recorded, else ""
    flaky: bool
    flips: int
    runs: int
    vendor: vendor_support.VendorSupport
    provenance: str  # the latest run's kind (builder.store.provenance.KINDS), "none" without a run
    provenance_label: str
    ladder: cell_ladder.Ladder
    provenance_short: str = ""  # the label without the key's fingerprint (the index's narrow column)
    vendor_claim: str = "none"  # step 1 in short: "AMD docs + official wheel", "official wheel", "AMD docs", "none"
    speed_contended: bool = False  # the speed numbers were measured under contention (conditions.contended)
    # torch built from a source no peer has shown to compile (manifest evidence step "source build, not yet proven")
    unproven: bool = False
    # such a cell's evidence step once a signed build record passed: "built by <signer>" (the signer's principal)
    proven_by: str | None = None
    gpus: tuple[str, ...] = ()  # the GPU names of its arch (recipes/gpu-names.toml) and the GPU its runs measured
    measured_in: str = (
        ""  # where its latest run ran: "AMD image rocm/pytorch:… (digest as AMD publishes it)", "an envbuild image"
    )
    # (says, source) of what the public record holds against its arch on its release (the recipes' arch_status and
    # arch_record: TheRock's "Build Passing", a failure report)
    caveats: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class GridRow:
    label: str
    entries: dict[str, list[IndexEntry]]  # torch line -> entries (one per Python line)


def build_report(
    store: MatrixStore,
    summaries: list[CellSummary],
    out_dir: Path,
    *,
    generated_at: str | None = None,
    vendor: dict | None = None,
    host_details: bool = False,
    warn=None,
    attempts_db: Path | None = None,
    reads: matrix_reads.ReadsAhead | None = None,
    site_recipes: Path | None = None,
) -> Path:
    """Write the site to `out_dir` (new, empty, or a previous report: replaced whole). Returns index.html.

    `summaries`: from `summarize(store, ..., runs_per_cell=PAGE_RUNS)` (pages show the newest runs;
    the per-cell data files get every run straight from `store`). `host_details`: publish each run's
    full host record (hostname, kernel command line, ...); by default only PUBLIC_HOST_KEYS and the
    GPU count are. `warn(message)` hears about logs left out (see `attempt_files`). `attempts_db`: the matrix file
    whose attempt folders hold the logs, when `store` is a scratch copy of it (default: `store`'s own file).
    `reads`: the whole-matrix reads, started before the summaries were collected (default: made here).
    `site_recipes`: the site's recipe folder the CLI was given (its cells' routes and locks), None for the packaged.
    """
    out_dir = Path(out_dir)
    _check_target(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    for stale in site_folders.sweep_stale(out_dir):
        if warn:
            warn(f"removed {stale.name}, left by an earlier report that was killed")
    build_dir = site_folders.building_dir(out_dir)
    try:
        build_dir.mkdir(mode=0o700)
        site = _Site(
            reads=reads.result() if reads is not None else matrix_reads.read(store),
            summaries=summaries,
            root=build_dir,
            generated_at=generated_at or utc_now(),
            vendor=vendor_support.load() if vendor is None else vendor,
            host_details=host_details,
            attempts_db=Path(attempts_db or store.path),
            site_recipes=site_recipes,
        )
        _write_site(store, site)
        _swap(build_dir, out_dir)
    except BaseException:
        shutil.rmtree(build_dir, ignore_errors=True)
        raise
    if site.skipped and warn:
        warn(
            f"{len(site.skipped)} log(s) not published, e.g. {site.skipped[0]}; a report publishes only the logs"
            " in attempt folders this matrix file's store created"
        )
    return out_dir / "index.html"


def public_host(host: dict | None) -> dict | None:
    """The part of a host record a published report shows: OS, kernel version, driver, GPU archs and count."""
    if not host:
        return None
    # the doctor counts the AMD GPUs it finds (/dev/kfd): none seen is "-", not a count next to an NVIDIA GPU
    return {**{k: host.get(k) for k in PUBLIC_HOST_KEYS}, "gpu_count": len(host.get("gpus") or []) or None}


def _check_target(out_dir: Path) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise ReportError(f"{out_dir} is a file; give a folder for the report")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / MARKER).exists():
        raise ReportError(
            f"{out_dir} is not empty and holds no envbuild report ({MARKER} is missing);"
            " nothing was changed. Give a new or empty folder, or a previous report's"
        )


def _swap(build_dir: Path, out_dir: Path) -> None:
    """Put the finished site in place: the old one is moved aside first, then removed."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(build_dir, 0o777 & ~umask)
    old = None
    if out_dir.exists():
        old = site_folders.old_dir(out_dir)
        os.rename(out_dir, old)
    try:
        os.rename(build_dir, out_dir)
    except BaseException:
        if old:
            os.rename(old, out_dir)  # the previous site stays whole
        raise
    if old:
        shutil.rmtree(old, ignore_errors=True)


@dataclass
class _Site:
    """What one report writes from: the matrix's reads and summaries, where (`root`, the building folder) and how;
    `skipped` collects the logs left out."""

    reads: matrix_reads.MatrixReads
    summaries: list[CellSummary]
    root: Path
    generated_at: str
    vendor: dict
    host_details: bool
    attempts_db: Path
    site_recipes: Path | None
    skipped: list[str] = field(default_factory=list)


def _write_site(store: MatrixStore, site: _Site) -> None:
    root, summaries = site.root, site.summaries
    counts = {v: sum(s.status == v for s in summaries) for v in VERDICTS}
    common = {"generated_at": site.generated_at, "version": __version__, "counts": counts}
    (root / MARKER).write_text("written by envbuild report; the next report replaces this folder whole\n")
    for name in ("style.css", "filter.js", "compare.js"):
        shutil.copyfile(TEMPLATES_DIR / name, root / name)
    for sub in ("cells", "plots", "data", "logs", "attestations", "evidence"):
        (root / sub).mkdir()
    # the data files are written by a worker thread meanwhile (SQLite and file writes run outside the GIL)
    with data_files.DataFiles(store, root, None if site.host_details else PUBLIC_HOST_KEYS) as data:
        for summary in summaries:
            data.add(summary.key, safe_slug(summary.key), summary_record(summary, with_runs=False))
        _write_pages(site, common)


def _write_pages(site: _Site, common: dict) -> None:
    """Every page of the site (cells, GPUs, index, compare), its plots, summary.md and data.json."""
    html, md = _environments()
    reads, summaries, root, vendor = site.reads, site.summaries, site.root, site.vendor
    recipes, speed = recipe_facts(site.site_recipes), reads.speed
    entries = {s.key: _index_entry(s, vendor, recipes.get(s.key), speed.get(s.key)) for s in summaries}
    throughput: dict[str, list[dict]] = {}
    for row in reads.train_metrics:
        # the plot follows the standard speed measurement; a contended one is never plotted (it is marked on the page)
        if row["configuration"].preset == cell_ladder.SPEED_PRESET and not row["contended"]:
            throughput.setdefault(row["cell_key"], []).append(row)
    index_cells = []
    cell_page = html.get_template("cell.html.j2")
    for summary in summaries:
        entry = entries[summary.key]
        page = _cell_page(
            summary,
            entry,
            root,
            site.host_details,
            throughput.get(summary.key, []),
            site.attempts_db,
            site.skipped,
            speed.get(summary.key),
        )
        (root / "cells" / f"{entry.slug}.html").write_text(cell_page.render(page=page, root="../", **common))
        index_cells.append(
            {
                **summary_line(summary),
                "cell": summary.cell.model_dump(),
                "data": f"data/{entry.slug}.json",
                "page": f"cells/{entry.slug}.html",
            }
        )
    torch_lines, rows = _grid(summaries, entries)
    ordered = [e for row in rows for t in torch_lines for e in row.entries[t]]
    filters = {
        "arch": sorted({e.arch for e in ordered}),
        "release": _release_filter(ordered),
        "torch": sorted({e.torch for e in ordered}, key=_version_key),
        "python": sorted({e.python for e in ordered}, key=_version_key),
        "gpu": sorted({g for e in ordered for g in e.gpus}),
        "status": list(VERDICTS),
        "provenance": [
            (kind, _PROVENANCE_FILTER[kind])
            for kind in (*provenance.KINDS, "none")
            if any(e.provenance == kind for e in ordered)
        ],
    }
    gpus = gpu_answers.answers(ordered)
    (root / "gpus").mkdir()
    for answer in gpus:
        (root / "gpus" / f"{answer.slug}.html").write_text(
            html.get_template("gpu.html.j2").render(a=answer, root="../", **common)
        )
    _write_index(root, html, common, summaries, entries, ordered, filters, gpus)
    (root / "summary.md").write_text(
        md.get_template("summary.md.j2").render(
            torch_lines=torch_lines, rows=rows, entries=ordered, link_base="", **common
        )
    )
    (root / "contributing.html").write_text(html.get_template("contributing.html.j2").render(root="", **common))
    report_compare.write(root, html, reads.per_preset, summaries, common)
    data = {"format": "envbuild-report", "version": 2, "generated_at": common["generated_at"], "cells": index_cells}
    (root / "data.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def index_page_name(number: int) -> str:
    """The file of the index's page `number` (1-based): index.html, index-2.html, ..."""
    return "index.html" if number == 1 else f"index-{number}.html"


def _write_index(
    root: Path,
    html: Environment,
    common: dict,
    summaries: list[CellSummary],
    entries: dict[str, IndexEntry],
    ordered: list[IndexEntry],
    filters: dict,
    gpus: list,
) -> None:
    """The index in pages of INDEX_PAGE_CELLS cells (grid order), and index-cells.js: every cell's filter values in
    short, so that a filter on any page finds the matching cells of every page."""
    pages = [ordered[i : i + INDEX_PAGE_CELLS] for i in range(0, len(ordered), INDEX_PAGE_CELLS)] or [[]]
    by_key = {s.key: s for s in summaries}
    links = [
        {"number": n, "href": index_page_name(n), "first": page[0].key if page else ""}
        for n, page in enumerate(pages, 1)
    ]
    for number, page in enumerate(pages, 1):
        torch_lines, rows = _grid([by_key[e.key] for e in page], entries)
        (root / index_page_name(number)).write_text(
            html.get_template("index.html.j2").render(
                torch_lines=torch_lines,
                rows=rows,
                entries=page,
                filters=filters,
                gpus=gpus,
                root="",
                pages=links,
                page=number,
                total=len(ordered),
                **common,
            )
        )
    fields = ("arch", "release", "torch", "python", "status", "provenance")
    values = {f: sorted({getattr(e, f) for e in ordered}) for f in fields}
    names = sorted({g for e in ordered for g in e.gpus})
    index = {f: {v: i for i, v in enumerate(values[f])} for f in fields}
    gpu_index = {g: i for i, g in enumerate(names)}
    cells = []
    for number, page in enumerate(pages, 1):
        for e in page:
            row = [e.key, number, *(index[f][getattr(e, f)] for f in fields), [gpu_index[g] for g in e.gpus]]
            cells.append(row + ([e.slug] if e.slug != e.key else []))
    data = {"fields": fields, "values": values, "gpus": names, "pages": len(pages), "cells": cells}
    (root / "index-cells.js").write_text("window.envbuildCells = " + json.dumps(data, separators=(",", ":")) + ";\n")


def release_value(flavor: str, accel: str | None) -> str:
    """The release filter's value of a cell: "rocm 6.2", "cuda 13.0", "cpu"."""
    return flavor if flavor == "cpu" or not accel or accel == "cpu" else f"{flavor} {accel}"


def _release_filter(entries: list[IndexEntry]) -> list[tuple[str, list[tuple[str, str]]]]:
    """The release filter's options per flavor, GPU flavors first: [("ROCm", [("rocm 6.2", "6.2"), ...]), ...,
    ("CPU", [("cpu", "CPU reference")])]: a ROCm release list never offers a CUDA release or "cpu"."""
    groups: dict[str, set[str]] = {}
    for e in entries:
        groups.setdefault(e.flavor, set()).add(e.accel)
    out = []
    for flavor in sorted(groups, key=lambda f: (_FLAVOR_ORDER.get(f, 1), f)):
        label = _FLAVOR_LABELS.get(flavor, flavor)
        if flavor == "cpu":
            out.append((label, [("cpu", "CPU reference")]))
        else:
            out.append((label, [(release_value(flavor, a), a) for a in sorted(groups[flavor], key=_version_key)]))
    return out


def summary_markdown(
    summaries: list[CellSummary],
    generated_at: str,
    vendor: dict | None = None,
    link_base: str | None = None,
    speed: dict[str, dict] | None = None,
    site_recipes: Path | None = None,
) -> str:
    """The site's summary.md alone (e.g. committed as docs/compatibility.md); `link_base` None: no links.
    `speed`: `store.newest_of_preset("speed")`, where the speed columns come from; `site_recipes` as for
    `build_report`."""
    _, md = _environments()
    vendor = vendor_support.load() if vendor is None else vendor
    recipes, speed = recipe_facts(site_recipes), speed or {}
    entries = {s.key: _index_entry(s, vendor, recipes.get(s.key), speed.get(s.key)) for s in summaries}
    torch_lines, rows = _grid(summaries, entries)
    ordered = [e for row in rows for t in torch_lines for e in row.entries[t]]
    counts = {v: sum(s.status == v for s in summaries) for v in VERDICTS}
    return md.get_template("summary.md.j2").render(
        torch_lines=torch_lines,
        rows=rows,
        entries=ordered,
        link_base=link_base,
        generated_at=generated_at,
        version=__version__,
        counts=counts,
    )


def _environments() -> tuple[Environment, Environment]:
    """(HTML environment, autoescaped; Markdown environment, every value escaped by `finalize`)."""
    options = dict(
        loader=FileSystemLoader(TEMPLATES_DIR),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    html = Environment(autoescape=select_autoescape(["html.j2"]), finalize=page_bounds.clip, **options)
    md = Environment(autoescape=False, finalize=markdown_text, **options)
    for env in (html, md):
        env.filters["num"] = _num
        env.filters["pct"] = percent
        env.filters["gib"] = lambda v: "-" if v is None else f"{v / 2**30:.2f} GiB"
    return html, md


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!~|])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def markdown_text(value) -> str:
    """Any value as inert Markdown table-cell text: one line, HTML entities, Markdown syntax backslashed."""
    text = " ".join(_CONTROL.sub(" ", str("" if value is None else value)).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def percent(value) -> str:
    """A fraction as a percentage: "47.6%", "0.0023%" for a tiny model's MFU (never a misleading 0.0%), and
    "–" where it could not be computed (CPU, a GPU without a known peak)."""
    if value is None:
        return "–"
    pct = 100 * value
    return f"{pct:.1f}%" if pct == 0 or abs(pct) >= 0.1 else f"{pct:.2g}%"


def _num(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def _version_key(version: str) -> tuple:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in version.split("."))


def _hardware(result: dict | None) -> str:
    """'AMD Instinct MI250X × 1', 'CPU only', or '-'."""
    hw = (result or {}).get("hardware") or {}
    if hw.get("device_type") == "cpu" or hw.get("vendor") == "cpu":
        return "CPU only"
    name = hw.get("gpu_name") or hw.get("arch")
    if not name:
        return "-"
    return f"{name} × {hw.get('gpu_count')}" if hw.get("gpu_count") else str(name)


def recipe_facts(site_recipes: Path | None = None) -> dict[str, cell_ladder.Recipe]:
    """cell key -> what the recipes (with the site's folder, if given) say about it (torch route, lock file), for
    every cell they resolve; {} when the recipes cannot be read (the ladder then shows step 2 open)."""
    from builder.plan.recipes import RecipeError, load
    from builder.plan.resolve import ResolveError, all_plans

    try:
        plans = all_plans(load(site=site_recipes))
    except (RecipeError, ResolveError, OSError):
        return {}
    return {
        p.cell.key: cell_ladder.Recipe(
            torch_source=p.torch_source,
            torch_requirement=p.torch_requirement,
            wheel_index_url=p.wheel_index_url,
            lock=f"recipes/locks/{p.lock_path.name}",
            locked=p.lock_path.is_file(),
            wheel_builder=p.release.wheel_builder if p.torch_source == "wheel" else "",
            caveats=tuple((c.says, c.source) for c in p.arch_caveats),
            unproven=p.unproven,
        )
        for p in plans
    }


def _ladder(
    s: CellSummary, vendor: vendor_support.VendorSupport, recipe: cell_ladder.Recipe | None, speed: dict | None
) -> cell_ladder.Ladder:
    deciding = [row for row in s.runs if row.get("counts", True) and run_config.of_result(row["result"]).decides]
    verdict_row = deciding[-1] if deciding else None
    return cell_ladder.ladder(
        s.cell,
        vendor,
        recipe,
        s.builds,
        verdict_row and verdict_row["result"],
        verdict_row,
        speed and speed["result"],
        speed,
    )


def _index_entry(
    s: CellSummary, vendor: dict, recipe: cell_ladder.Recipe | None = None, speed: dict | None = None
) -> IndexEntry:
    """One cell of the index. Its speed, MFU, samples per GPU-hour and cost come from its latest `speed` preset
    run only, never from the smoke verdict (a tiny model's numbers say nothing about the hardware)."""
    train = (speed or {}).get("result") or {}
    metrics = train.get("metrics") or {}
    cell = s.cell
    support = vendor_support.support_of(cell, vendor)
    return IndexEntry(
        key=s.key,
        slug=safe_slug(s.key),
        flavor=cell.flavor,
        accel=cell.accel_version or "cpu",
        release=release_value(cell.flavor, cell.accel_version),
        arch=cell.arch or "none",
        torch=cell.torch,
        python=cell.python,
        status=s.status,
        failure_class=s.failure_class,
        note=s.note,
        last_at=(s.last_event_at or "")[:16].replace("T", " "),
        hardware=_hardware(s.latest_run),
        samples_per_s=metrics.get("samples_per_s"),
        mfu=metrics.get("mfu"),
        **_cost(train),
        flaky=s.flaky,
        flips=len(s.flips),
        runs=s.run_count,
        vendor=support,
        ladder=_ladder(s, support, recipe, speed),
        speed_contended=cell_ladder.contended(train),
        vendor_claim=cell_ladder.vendor_claim(support, recipe),
        caveats=recipe.caveats if recipe else (),
        **_evidence_step(s, recipe),
        gpus=_gpu_names(s),
        measured_in=_measured_in(s.latest_run),
        **_cell_provenance(s),
    )


def _measured_in(result: dict | None) -> str:
    """Where a run ran, for the index: the image's origin (a vendor's, envbuild's, another), or a Python
    environment of its own (`--local`); "" without a run."""
    if not result:
        return ""
    image = result.get("image") if isinstance(result.get("image"), dict) else {}
    if not (image.get("tag") or image.get("digest")):
        return "a Python environment (--local)"
    vendor = image_origin.vendor_label(image)
    return vendor or ("an image not built by envbuild" if image.get("origin") == "foreign" else "an envbuild image")


def _gpu_names(s: CellSummary) -> tuple[str, ...]:
    """The GPU names a cell answers for: its arch's marketing names, and the name its latest run's GPU reported."""
    names = set(gpu_names.marketing_names(s.cell.arch)) if s.cell.arch else set()
    measured = ((s.latest_run or {}).get("hardware") or {}).get("gpu_name")
    if s.cell.arch and isinstance(measured, str) and measured:
        names.add(measured)
    return tuple(sorted(names))


def _evidence_step(s: CellSummary, recipe: cell_ladder.Recipe | None) -> dict:
    """A source cell no peer had shown to compile (its builds' manifests, or the recipes, say so) is unproven until a
    signed build record of it passes; then its evidence step is "built by <signer>"."""
    passes = [b for b in s.builds if b.get("status") == "pass" and cell_ladder.signed(b)]
    if (s.unproven or (recipe is not None and recipe.unproven)) and passes:
        return {"unproven": False, "proven_by": cell_ladder.built_by(passes[-1])}
    return {"unproven": s.unproven, "proven_by": None}


def _cell_provenance(s: CellSummary) -> dict:
    """A cell carries the provenance of the run that makes its verdict (its latest counted run)."""
    counted = [row for row in s.runs if row.get("counts", True)] or s.runs
    if not counted:
        return {"provenance": "none", "provenance_label": "no run", "provenance_short": "no run"}
    row = counted[-1]
    principal = (row["signer"] or "").split(" (", 1)[0] or None
    short = {provenance.CI: "this project's CI", provenance.CONTRIBUTED: f"signed by {principal}"}
    return {
        "provenance": row["provenance"],
        "provenance_label": provenance.label(row["provenance"], row["signer"]),
        "provenance_short": short.get(row["provenance"], "unsigned"),
    }


def _measured_by(summary: CellSummary, root: Path) -> list[dict]:
    """Who measured each shown run, on what hardware, with its attestation copied into the site."""
    rows = []
    for row in reversed(summary.runs[-HISTORY_ROWS:]):
        result = row["result"]
        host = public_host(result.get("host")) or {}
        link = None
        if row.get("attestation") and row["provenance"] in provenance.PUBLISHED:
            link = f"attestations/{safe_slug(result['run_id'])}.intoto.jsonl"
            (root / link).write_text(row["attestation"] + "\n")
        rows.append(
            {
                "run_id": result["run_id"],
                "at": result.get("finished_at") or row["recorded_at"],
                "verdict": run_verdict(result),
                "provenance": row["provenance"],
                "label": provenance.label(row["provenance"], row["signer"]),
                "hardware": _hardware(result),
                "host": " · ".join(
                    str(v)
                    for v in (
                        host.get("os"),
                        host.get("kernel") and f"kernel {host['kernel']}",
                        host.get("amdgpu_version") and f"amdgpu {host['amdgpu_version']}",
                    )
                    if v
                )
                or "-",
                "attestation": link,
            }
        )
    return rows


def _cost(train: dict) -> dict:
    """Samples per GPU-hour of a GPU run and, with a public price (recipes/gpu-prices.toml), cost per 1k samples."""
    throughput = diff.profile(train, None)["speed"] if train else {}
    per_hour = throughput.get("samples_per_gpu_hour")
    price = gpu_prices.price_for(train) if per_hour else None
    cost = f"${1000 * price.usd_per_gpu_hour / per_hour:.4f} (price of {price.as_of})" if price else ""
    return {"samples_per_gpu_hour": per_hour, "cost_per_1k": cost}


def _row_label(cell) -> tuple[tuple, str]:
    label = f"{_FLAVOR_LABELS.get(cell.flavor, cell.flavor)} {cell.accel_version or ''}".strip()
    if cell.arch:
        label += f" · {cell.arch}"
        names = gpu_names.marketing_names(cell.arch)
        label += f" ({', '.join(names)})" if names else ""
    return (
        _FLAVOR_ORDER.get(cell.flavor, 1),
        cell.flavor,
        _version_key(cell.accel_version or "0"),
        cell.arch or "",
    ), label


def _grid(summaries: list[CellSummary], entries: dict[str, IndexEntry]) -> tuple[list[str], list[GridRow]]:
    """Rows: accelerator release (× arch); columns: torch line; one entry per Python line in a slot."""
    torch_lines = sorted({s.cell.torch for s in summaries}, key=_version_key)
    rows: dict[tuple, GridRow] = {}
    for s in sorted(summaries, key=lambda s: (_row_label(s.cell)[0], _version_key(s.cell.python))):
        sort_key, label = _row_label(s.cell)
        row = rows.setdefault(sort_key, GridRow(label=label, entries={t: [] for t in torch_lines}))
        row.entries[s.cell.torch].append(entries[s.key])
    return torch_lines, [rows[k] for k in sorted(rows)]


def _cell_page(
    summary: CellSummary,
    entry: IndexEntry,
    root: Path,
    host_details: bool,
    throughput: list[dict],
    db: Path,
    skipped: list[str],
    speed: dict | None = None,
) -> dict:
    """Everything one cell page shows, with its plots drawn and logs copied into the site."""
    latest, train = summary.latest_run, summary.latest_train_run
    plots = {"curves": None, "accuracy": None}
    if train:
        plots["curves"] = report_plots.training_curves(train, root / "plots" / f"{entry.slug}-curves.svg")
        plots["accuracy"] = report_plots.accuracy_before_after(train, root / "plots" / f"{entry.slug}-accuracy.svg")
    plots["throughput"] = report_plots.throughput_history(throughput, root / "plots" / f"{entry.slug}-throughput.svg")
    image = _latest_image(summary)
    run_logs = {
        e.ident: _copy_log(db, e.attempt_dir, ("container.log", "workload.log"), root, skipped)
        for e in summary.events[-HISTORY_ROWS:]
        if e.kind == "run"
    }
    builds = [
        {
            **b,
            "log_link": _copy_log(db, b.get("attempt_dir"), ("build.log",), root, skipped),
            **_copy_evidence(db, b, root, skipped),
        }
        for b in summary.builds[-HISTORY_ROWS:]
    ]
    build_logs = {b["build_uid"]: b["log_link"] for b in builds}
    host = (latest or {}).get("host")
    return {
        "summary": summary,
        "entry": entry,
        "cell": summary.cell,
        "latest": _only_keys(latest, _RUN_KEYS) if latest else None,
        "latest_verdict": run_verdict(latest) if latest else None,
        "latest_contention": _contention(latest),
        "train": train,
        "train_contention": _contention(train),
        "metrics": _metrics((train or {}).get("metrics") or {}),
        "plots": {name: f"plots/{p.name}" if p else None for name, p in plots.items()},
        "versions": page_bounds.rows(sorted(((latest or {}).get("versions") or {}).items())),
        "hardware": _hardware(latest),
        "image_tag": image.get("tag"),
        "image_digest": image.get("digest"),
        "image_origin": image_origin_label(image),
        "image_checked": image_checked(image),
        "reproduce": _reproduce(
            summary.cell,
            image.get("tag"),
            entry.ladder.steps[1].state == cell_ladder.DONE,
            cell_ladder.foreign_image(image),
        ),
        "recorded_command": _recorded_command(latest),
        "configuration": run_config.VERDICT_LABEL,
        "measurements": [_measurement(summary, c) for c in reversed(summary.configurations)],
        "builds": list(reversed(builds)),
        "host": page_bounds.rows(_rows(host) if host_details else _rows(public_host(host))) if host else None,
        "probes": page_bounds.probes(
            [
                {**_only_keys(p, _PROBE_KEYS), "values": _rows(p.get("values"))}
                for p in (latest or {}).get("probes") or []
            ]
        ),
        "history": [
            (e, run_logs.get(e.ident) if e.kind == "run" else build_logs.get(e.ident))
            for e in reversed(summary.events[-HISTORY_ROWS:])
        ],
        "history_total": len(summary.events),
        "flips": list(reversed(summary.flips))[:10],
        "measured_by": _measured_by(summary, root),
        "speed": _speed_page(speed, entry),
    }


def _speed_page(speed: dict | None, entry: IndexEntry) -> dict | None:
    """The cell's standard speed measurement (its latest `speed` preset run): numbers, learning check, conditions."""
    if not speed:
        return None
    result = speed["result"]
    metrics = result.get("metrics") if isinstance(result.get("metrics"), dict) else {}
    before = (
        (metrics.get("eval_before") or {}).get("accuracy") if isinstance(metrics.get("eval_before"), dict) else None
    )
    after = (metrics.get("eval_after") or {}).get("accuracy") if isinstance(metrics.get("eval_after"), dict) else None
    learned = "-" if after is None else f"eval accuracy {_num(before, 3)} → {_num(after, 3)}"
    model = result.get("model") if isinstance(result.get("model"), dict) else {}
    return {
        "metrics": _metrics(metrics),
        "samples_per_gpu_hour": entry.samples_per_gpu_hour,
        "cost_per_1k": entry.cost_per_1k,
        "learned": learned,
        "model": str(model.get("id") or "-"),
        "run_id": result.get("run_id"),
        "status": result.get("status"),
        "finished_at": result.get("finished_at"),
        "signer": provenance.label(speed["provenance"], speed["signer"]),
        "contended": cell_ladder.contended(result),
        "conditions": conditions_text(result),
        "command": _recorded_command(result),
    }


def conditions_text(result: dict) -> str:
    """The recorded conditions of a measurement in one line ("-" when the run recorded none)."""
    c = result.get("conditions") if isinstance(result.get("conditions"), dict) else None
    if not c:
        return "not recorded (a run from before conditions were recorded)"
    parts = []
    load = c.get("load_average") if isinstance(c.get("load_average"), dict) else {}
    if load:
        parts.append(f"load average {_value_text(load.get('start'))} → {_value_text(load.get('end'))}")
    if c.get("cpu_count") is not None:
        limit = c.get("cgroup_cpu_limit")
        parts.append(f"{c['cpu_count']} CPUs" + (f" (cgroup limit {_value_text(limit)})" if limit is not None else ""))
    gpu = c.get("gpu") if isinstance(c.get("gpu"), dict) else {}
    if gpu.get("other_processes") is not None:
        parts.append(f"other processes on the GPUs: {_value_text(gpu.get('other_processes'))}")
    for key, label in (("sm_clock_mhz", "SM clock MHz"), ("power_limit_w", "power cap W")):
        if gpu.get(key) is not None:
            parts.append(f"{label} {_value_text(gpu[key])}")
    if c.get("other_envbuild_runs") is not None:
        parts.append(f"other envbuild runs on this matrix: {_value_text(c['other_envbuild_runs'])}")
    verdict = (
        "CONTENDED: " + "; ".join(cell_ladder.contention_reasons(result))
        if cell_ladder.contended(result)
        else "uncontended"
    )
    return " · ".join([verdict, *parts])


def _measurement(summary: CellSummary, configuration: str) -> dict:
    """One measurement configuration on a cell page: its status line, the numbers of its latest completed run
    and the command that made that run."""
    result = summary.latest_completed(configuration)
    return {
        "line": configuration_line(summary, configuration),
        "metrics": _metrics((result or {}).get("metrics") or {}) if result else None,
        "run_id": (result or {}).get("run_id"),
        "command": _recorded_command(result) if result else None,
        "contention": _contention(result),
    }


def _contention(result: dict | None) -> str | None:
    """What competed with a contended run ("; "-joined), None for a run nothing competed with (or no run)."""
    return "; ".join(cell_ladder.contention_reasons(result)) if result and cell_ladder.contended(result) else None


def _recorded_command(result: dict | None) -> dict | None:
    """{"text", "recorded"}: the `envbuild run workload` command the run recorded (invocation.envbuild), or, for
    a result written before commands were recorded, one rebuilt from its preset, model and image."""
    if not result:
        return None
    invocation = result.get("invocation") if isinstance(result.get("invocation"), dict) else {}
    command = invocation.get("envbuild")
    if isinstance(command, list) and all(isinstance(x, str) for x in command):
        return {"text": shlex.join(command), "recorded": True}
    config = result.get("config") if isinstance(result.get("config"), dict) else {}
    model = (result.get("model") or {}).get("id") if isinstance(result.get("model"), dict) else None
    image = (result.get("image") or {}).get("tag") if isinstance(result.get("image"), dict) else None
    rebuilt = [
        "envbuild",
        "run",
        "workload",
        *(["--image", image] if image else ["--local"]),
        "--preset",
        str(config.get("preset") or "smoke"),
    ]
    rebuilt += ["--model", str(model)] if model else []
    return {"text": shlex.join(rebuilt), "recorded": False}


def image_origin_label(image: dict) -> str | None:
    """Who made the image a run used, as far as its digest shows (builder.plan.image_origin): "AMD image
    rocm/pytorch:… (digest as AMD publishes it)", "rocm/pytorch:… (a local name: origin unverified)", "SIF at a LUMI
    path: …", "not built by envbuild" (measured as it is) or "built by envbuild"; None without an image."""
    if not isinstance(image, dict) or not (image.get("tag") or image.get("digest")):
        return None
    vendor = image_origin.vendor_label(image)
    if vendor:
        return vendor
    return "not built by envbuild (measured as it is)" if image.get("origin") == "foreign" else "built by envbuild"


def image_checked(image: dict) -> str | None:
    """For an image envbuild did not build: what the measuring host checked itself and what rests on the image's
    word (its record's `checked` block, docs/measure-any-image.md "Which claims are believed"); None for another."""
    checked = image.get("checked") if isinstance(image, dict) and image.get("origin") == "foreign" else None
    host = checked.get("by_host") if isinstance(checked, dict) else None
    if not isinstance(host, dict):
        return None
    seen = host.get("gpus_seen") if isinstance(host.get("gpus_seen"), dict) else {}
    gpus = [f"{vendor} {g}" for vendor in ("amd", "nvidia") for g in _texts(seen.get(vendor))]
    word = _texts(checked.get("from_image_only"))
    return (
        f"the measuring host saw {', '.join(gpus) or 'no GPU'} and passed {host.get('devices_passed') or '?'} devices "
        f"into the container; on the image's word alone: {', '.join(word) or '-'}"
    )


def _texts(value, most: int = 16) -> list[str]:
    return [str(v)[:80] for v in value[:most] if isinstance(v, str)] if isinstance(value, list) else []


def _reproduce(cell, tag: str | None, known: bool = True, foreign: tuple[str, str] | None = None) -> list[str]:
    """Copy-paste commands that rebuild this cell's image and run the workload in it: for an image envbuild did not
    build, the run in it again; without a recipe for the cell, no build command (it would exit 2)."""
    if foreign:
        return [shlex.join(["envbuild", "run", "workload", *foreign])]
    gpus = ["--gpus", "all"] if cell.flavor != "cpu" else []
    if not known:
        return [shlex.join(["envbuild", "run", "workload", "--image", tag, *gpus])] if tag else []
    if cell.flavor in ("rocm", "cuda"):  # the release flag implies the flavor (and a cuda image needs it)
        image = ["envbuild", "image", f"--{cell.flavor}", cell.accel_version, "--torch", cell.torch]
        image += ["--arch", cell.arch] if cell.arch else []
    else:
        image = ["envbuild", "image", "--flavor", cell.flavor, "--torch", cell.torch]
    image += ["--python", cell.python]
    run = ["envbuild", "run", "workload", "--image", tag or "TAG", *gpus]
    commands = [shlex.join(image), shlex.join(run)]
    if not tag:
        commands[1] += "    # TAG: the tag `envbuild image` printed"
    return commands


def _copy_log(db: Path, attempt_dir: str | None, names: tuple[str, ...], root: Path, skipped: list[str]) -> str | None:
    """Copy the tail of an attempt's log into the site, if the whitelist allows it; its site-relative path.

    Only a log in an attempt folder this matrix file's store created is opened (`attempt_files`);
    paths named by data (a build's `log_path`, a run's `source`) never are.
    """
    path, why_not = attempt_files.attempt_log(db, attempt_dir, names)
    if why_not:
        skipped.append(why_not)
    if path is None:
        return None
    try:
        data = attempt_files.read_tail(path, LOG_TAIL_BYTES)
    except OSError as exc:
        skipped.append(f"{path}: {exc.strerror}")
        return None
    name = f"logs/{safe_slug(str(Path(attempt_dir).name))}-{path.stem}.txt"
    (root / name).write_bytes(scrub_tail(data, known_secrets()))  # kept logs are scrubbed; older ones may not be
    return name


def _copy_evidence(db: Path, build: dict, root: Path, skipped: list[str]) -> dict:
    """{"sbom_link", "provenance_link", "envelope_link"}: the build's SBOM, provenance statement and its signed
    envelope copied into the site from the build's attempt folder (as logs are: only one the store created), each
    linked file only when it is the one the build's record names by sha256."""
    links = {"sbom_link": None, "provenance_link": None, "envelope_link": None}
    record = build.get("record") or {}
    attempt_dir = build.get("attempt_dir")
    slug = safe_slug(str(build.get("build_uid") or "build"))
    for key, part, name in (
        ("sbom_link", "sbom", SBOM_FILE),
        ("provenance_link", "provenance", PROVENANCE_FILE),
        ("envelope_link", "provenance", PROVENANCE_ENVELOPE),
    ):
        link = record.get(part)
        if not link:
            continue
        path, why_not = attempt_files.attempt_log(db, attempt_dir, (name,))
        if why_not:
            skipped.append(why_not)
        if path is None:
            continue
        try:
            data = attempt_files.read_tail(path, EVIDENCE_BYTES + 1)
        except OSError as exc:
            skipped.append(f"{path}: {exc.strerror}")
            continue
        if len(data) > EVIDENCE_BYTES or (
            name != PROVENANCE_ENVELOPE and hashlib.sha256(data).hexdigest() != link["sha256"]
        ):
            skipped.append(f"{path}: not the file the build record links (or larger than {EVIDENCE_BYTES} bytes)")
            continue
        target = f"evidence/{slug}-{name}"
        (root / target).write_bytes(data)
        links[key] = target
    if links["provenance_link"] is None:
        links["envelope_link"] = None
    return links


def _rows(mapping) -> list[tuple[str, str]]:
    """A nested dict as readable (dotted key, value) rows: numbers rounded, lists joined."""
    rows: list[tuple[str, str]] = []

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict) and value:
            for k in sorted(value):
                walk(f"{prefix}.{k}" if prefix else str(k), value[k])
        else:
            rows.append((prefix or "value", _value_text(value)))

    if mapping:
        walk("", mapping)
    return rows


def _value_text(value) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "-"}[value]
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list):
        return "; ".join(_value_text(v) for v in value) or "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_value_text(v)}" for k, v in sorted(value.items())) or "-"
    return str(value)


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


_METRIC_KEYS = (
    "steps",
    "samples_per_s",
    "tokens_per_s",
    "mfu",
    "peak_memory_allocated_bytes",
    "peak_memory_reserved_bytes",
)
_EVAL_KEYS = ("accuracy", "macro_f1", "loss")
_RUN_KEYS = ("run_id", "command", "status", "error_class", "error", "finished_at", "wall_time_s")
_PROBE_KEYS = ("name", "status", "message")


def _only_keys(mapping: dict, keys: tuple[str, ...]) -> dict:
    """`mapping` restricted to `keys`, absent ones None (the templates read every key)."""
    return {k: mapping.get(k) for k in keys}


def _metrics(metrics: dict) -> dict:
    picked = _only_keys(metrics, _METRIC_KEYS)
    for name in ("eval_before", "eval_after"):
        picked[name] = _only_keys(metrics.get(name) or {}, _EVAL_KEYS)
    return picked
