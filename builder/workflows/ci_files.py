"""`envbuild ci render`: the product's CI files (the GitHub Actions matrix workflow and docker-bake.hcl, one job per
recipe cell) written into a folder, or compared with a fresh render of them (`check`)."""

from __future__ import annotations

import filecmp
import tempfile
from dataclasses import dataclass
from pathlib import Path

from builder.plan.ci_render import GENERATED_DIR, render_ci
from builder.plan.recipe_cells import RecipeCellsError
from builder.workflows.errors import Failed

__all__ = ["GENERATED_DIR", "CiRequest", "CiFiles", "render_ci_files"]


@dataclass(frozen=True)
class CiRequest:
    out_dir: Path
    check: bool  # write nothing; name the files that differ from a fresh render
    site: Path | None  # a site's recipe folder over the packaged one


@dataclass(frozen=True)
class CiFiles:
    written: tuple[Path, ...] = ()
    stale: tuple[str, ...] = ()  # with `check`: the files missing in out_dir or unlike a fresh render


def render_ci_files(request: CiRequest) -> CiFiles:
    """Render the CI files into `request.out_dir`, or (`check`) into a scratch folder compared with it; recipe cells
    that do not render are Failed (exit code 1)."""
    try:
        if not request.check:
            return CiFiles(written=tuple(render_ci(request.out_dir, site=request.site)))
        with tempfile.TemporaryDirectory() as fresh:
            stale = tuple(
                path.name
                for path in render_ci(Path(fresh), site=request.site)
                if not (request.out_dir / path.name).is_file()
                or not filecmp.cmp(path, request.out_dir / path.name, shallow=False)
            )
    except RecipeCellsError as exc:
        raise Failed(str(exc)) from exc
    return CiFiles(stale=stale)
