"""Shared helpers for the workload tests: a quick in-process run of the smoke recipe."""

import warnings

from workload.runner import train_command
from workload.training.presets import PRESETS

#: result.json's top-level keys, in the order the workload writes them (workload.result.envelope)
RESULT_KEYS = [
    "schema_version",
    "run_id",
    "command",
    "status",
    "error_class",
    "error",
    "started_at",
    "finished_at",
    "wall_time_s",
    "versions",
    "hardware",
    "model",
    "dataset",
    "config",
    "metrics",
    "probes",
    "artifacts",
]


def quick_train(out_dir=None, probes=False, **changes):
    """A few steps of the smoke recipe (no learning threshold unless given)."""
    changes.setdefault("max_steps", 3)
    changes.setdefault("min_accuracy", 0.0)
    warnings.filterwarnings("ignore")
    return train_command(PRESETS["smoke"].replace(**changes), out_dir=out_dir, probes=probes, quiet=True)
