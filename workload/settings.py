"""Allowed ranges of the training settings: a value outside them is the user's mistake (exit 2, nothing written),
never a run that trains on nonsense and becomes a verdict about the environment."""

from __future__ import annotations

import math
import re

from .errors import InputError
from .training.presets import Recipe


class SettingError(InputError):
    """A training setting outside its allowed range; the message names the option and what is allowed."""

    error_class = "usage_error"


# field -> (option, lowest, highest, kind); None = no bound on that side. Bounds are what can train at all
# (at least one step, one sample, a token), or, at the top, far past anything a run here could use.
RANGES = {
    "batch_size": ("--batch-size", 1, 65_536, int),
    "epochs": ("--epochs", 1, 10_000, int),
    "max_steps": ("--max-steps", 1, 10_000_000, int),
    "untimed_steps": ("--untimed-steps", 0, 10_000_000, int),
    "max_length": ("--max-length", 8, 131_072, int),
    "warmup_steps": ("--warmup-steps", 0, 10_000_000, int),
    "lora_r": ("--lora-r", 1, 4_096, int),
    "pad_multiple": ("--pad-multiple", 1, 4_096, int),
    "seed": ("--seed", 0, 2**32 - 1, int),
}
ATTENTION = ("auto", "eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
_DEVICE = re.compile(r"auto|cpu|cuda(:\d{1,3})?")  # the whole string (fullmatch): not cpu0, not "cpu --x"


def _bounds(low, high) -> str:
    return f"from {low} to {high}"


def check_recipe(recipe: Recipe) -> Recipe:
    """Return `recipe` unchanged, or raise SettingError naming the first setting out of range."""
    for name, (option, low, high, kind) in RANGES.items():
        value = getattr(recipe, name)
        if value is None and name == "max_steps":
            continue  # no limit: the epochs decide
        if not isinstance(value, kind) or isinstance(value, bool) or not low <= value <= high:
            extra = " (leave --max-steps out to train for --epochs)" if name == "max_steps" else ""
            raise SettingError(f"{option} {value}: must be a whole number {_bounds(low, high)}{extra}")
    lr = recipe.learning_rate
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or not 0 < lr <= 10:
        raise SettingError(f"--lr {lr}: must be a number above 0 and at most 10 (the presets use 2e-4 and 1e-2)")
    if not isinstance(recipe.lora_dropout, (int, float)) or not 0 <= recipe.lora_dropout < 1:
        raise SettingError(f"--lora-dropout {recipe.lora_dropout}: must be at least 0 and below 1")
    bar = recipe.min_accuracy
    if bar is not None and (not isinstance(bar, (int, float)) or not 0 <= bar <= 1):
        raise SettingError(
            f"--min-accuracy {bar}: must be from 0 to 1 (an eval accuracy); leave it out for "
            'the default bar (docs/matrix.md, "The pass bar")'
        )
    if recipe.attn_implementation not in (None, *ATTENTION):
        raise SettingError(f"--attn {recipe.attn_implementation}: must be one of {', '.join(ATTENTION)}")
    return recipe


def check_device(device: str) -> str:
    """`auto`, `cpu`, `cuda` or `cuda:N` (ROCm GPUs are cuda too); SettingError otherwise."""
    if not isinstance(device, str) or not _DEVICE.fullmatch(device):
        raise SettingError(f"--device {device}: must be auto, cpu, cuda or cuda:N")
    return device
