"""The report's answer to "what should I use on my <GPU>?": one page per GPU name the recipes know
(recipes/gpu-names.toml), its cells in the order of the evidence: measured passes first (signed before unsigned,
newest first), then cells AMD's docs or published wheels claim, then cells that only render and lock (among these,
cells with no caveat on the GPU first); and what the public record holds against the GPU's arch per release
(TheRock's development status, failure reports: recipes/rocm.toml arch_status and arch_record)."""

from __future__ import annotations

from dataclasses import dataclass

from builder.report.ladder import DONE
from builder.slug import safe_slug
from builder.plan import gpu_names

_SIGNED_FIRST = {"ci": 0, "contributed": 1, "unsigned": 2, "none": 3}


@dataclass(frozen=True)
class GpuAnswer:
    name: str  # as AMD writes it: "MI250X"
    arch: str
    slug: str
    measured: tuple  # IndexEntry, passes first
    claimed: tuple
    renders: tuple
    # (release, ((says, source), ...)): what the public record holds against this GPU's arch on each release
    caveats: tuple = ()

    @property
    def best(self):
        """The cell to try first, or None when no cell of this GPU renders."""
        return next(iter(self.measured or self.claimed or self.renders), None)


def answers(entries: list) -> list[GpuAnswer]:
    """One answer per known GPU name, each from the index entries (builder.report.site.IndexEntry)."""
    out = []
    for arch, name in sorted(set(gpu_names.names().values()), key=lambda pair: (pair[0], pair[1])):
        mine = [e for e in entries if e.arch == arch or name in e.gpus]
        measured = sorted(
            (e for e in mine if e.status in ("pass", "partial")),
            key=lambda e: (e.status != "pass", _SIGNED_FIRST.get(e.provenance, 9), _neg(e.last_at)),
        )
        rest = [e for e in mine if e not in measured]
        claimed = [e for e in rest if e.ladder.steps[0].state == DONE]
        renders = [e for e in rest if e not in claimed and e.ladder.steps[1].state == DONE]
        # not measured: a cell with no caveat on this GPU before one with a caveat, then the newest torch
        key = lambda e: (  # noqa: E731
            e.status == "fail",
            bool(e.caveats),
            [-int(x) for x in e.torch.split(".") if x.isdigit()],
        )
        by_release = sorted(mine, key=lambda e: [int(x) for x in e.accel.split(".") if x.isdigit()])
        caveats = {f"ROCm {e.accel}": e.caveats for e in by_release if e.caveats}
        out.append(
            GpuAnswer(
                name,
                arch,
                safe_slug(name.replace(" ", "-")),
                tuple(measured),
                tuple(sorted(claimed, key=key)),
                tuple(sorted(renders, key=key)),
                tuple(caveats.items()),
            )
        )
    return out


def _neg(text: str) -> tuple:
    """Newest first for "YYYY-MM-DD HH:MM" strings."""
    return tuple(-ord(c) for c in text or "")
