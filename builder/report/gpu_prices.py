"""Public GPU-hour prices (recipes/gpu-prices.toml), each with its source and date."""

from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from builder.paths import RECIPES_DIR
from builder.plan.recipes import RecipeError


class GpuPrice(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    usd_per_gpu_hour: float
    as_of: str
    source: str


@lru_cache(maxsize=2)
def load(path: Path = RECIPES_DIR / "gpu-prices.toml") -> dict[str, GpuPrice]:
    """GPU name -> price; a file that does not validate is a RecipeError naming it."""
    try:
        return {name: GpuPrice(**entry) for name, entry in tomllib.loads(path.read_text()).items()}
    except (OSError, tomllib.TOMLDecodeError, ValidationError, TypeError) as exc:
        raise RecipeError(f"{path}: {exc}") from exc


def price_for(result: dict) -> GpuPrice | None:
    """The price of the GPU a result ran on, if a public one is recorded."""
    return load().get(((result.get("hardware") or {}).get("gpu_name")) or "")
