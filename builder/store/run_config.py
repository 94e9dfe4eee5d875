"""The configuration a run belongs to (preset, model) and whether it is the verdict configuration, the run that
decides its cell (docs/matrix.md "Verdict runs and measurements").

The verdict configuration is the `smoke` train preset as it stands: model `tiny-gemma`, the bundled sample
data, no setting overridden, probes on. Every other run (another preset or model, random-weight speed runs,
`--max-steps`, `--min-accuracy`, other data, `--no-probes`, the `probe` command) is a measurement of its own
configuration: shown with its own status, never the cell's verdict, never a flip. A measurement's label names what
differs from the verdict configuration (`smoke · tiny-gemma · max_steps=5`), so a shortened run never reads like the
verdict.
"""

from __future__ import annotations

import functools
import json
import posixpath
from dataclasses import dataclass
from typing import NamedTuple

VERDICT_PRESET = "smoke"
VERDICT_MODEL = "tiny-gemma"
BUNDLED_DATA = "emotions.jsonl"
VERDICT_LABEL = f"{VERDICT_PRESET} · {VERDICT_MODEL}"
#: The standard speed measurement (docs/workload.md "The speed preset") and the data it makes itself.
SPEED_PRESET, SPEED_DATA = "speed", "synthetic"
#: The smoke preset's own pass bar, how a result written before `invocation` shows it ran the preset as it stands.
LEGACY_SMOKE_BAR = 0.45

#: The result fields the rule reads, by name, as SQLite JSON paths (`MatrixStore.run_events` extracts them, guarded
#: by json_valid so a damaged row is read without them).
FIELDS = {
    "command": "$.command",
    "preset": "$.invocation.preset",
    "model": "$.invocation.model",
    "overrides": "$.invocation.overrides",
    "bundled": "$.invocation.data.bundled",
    "probes": "$.invocation.probes",
    "config_preset": "$.config.preset",
    "model_id": "$.model.id",
    "max_steps": "$.config.max_steps",
    "min_accuracy": "$.config.min_accuracy",
    "path": "$.dataset.path",
    "invocation": "$.invocation",
    "data_name": "$.invocation.data.name",
}
#: One json_extract with every path parses the stored JSON once (one call per path parsed it 12 times: most of
#: `matrix list`'s time at 10,000 runs); it returns the values as one JSON array, in FIELDS' order.
SQL = "CASE WHEN json_valid(result_json) THEN json_extract(result_json, {}) END".format(
    ", ".join(f"'{path}'" for path in FIELDS.values())
)


class RunFields(NamedTuple):
    """The values of FIELDS in one run's result, whether read from its dict (`of_result`) or extracted by SQLite
    (`of_row`); `invocation` is None for a result written before envbuild recorded it."""

    command: object
    preset: object
    model: object
    overrides: object
    bundled: object
    probes: object
    config_preset: object
    model_id: object
    max_steps: object
    min_accuracy: object
    path: object
    invocation: object
    data_name: object


@dataclass(frozen=True)
class RunConfiguration:
    """A run's configuration: `preset` and `model` name it, `changes` what else differs from the preset as it
    stands (overrides, other data, no probes); `decides` when it is the verdict configuration."""

    preset: str
    model: str
    decides: bool
    changes: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return " · ".join((self.preset, self.model, *self.changes))


UNKNOWN = RunConfiguration("?", "?", True)  # a row whose JSON is damaged: its own columns still give the verdict


def of_result(result: dict) -> RunConfiguration:
    """The configuration of a result.json dict."""
    invocation = result.get("invocation") if isinstance(result.get("invocation"), dict) else None
    data = (invocation or {}).get("data") if isinstance((invocation or {}).get("data"), dict) else {}
    config = result.get("config") if isinstance(result.get("config"), dict) else {}
    model = result.get("model") if isinstance(result.get("model"), dict) else {}
    dataset = result.get("dataset") if isinstance(result.get("dataset"), dict) else {}
    return _configuration(
        RunFields(
            command=result.get("command"),
            preset=(invocation or {}).get("preset"),
            model=(invocation or {}).get("model"),
            overrides=(invocation or {}).get("overrides"),
            bundled=data.get("bundled"),
            probes=(invocation or {}).get("probes"),
            config_preset=config.get("preset"),
            model_id=model.get("id"),
            max_steps=config.get("max_steps"),
            min_accuracy=config.get("min_accuracy"),
            path=dataset.get("path"),
            invocation=invocation,
            data_name=data.get("name"),
        )
    )


@functools.lru_cache(maxsize=1024)  # thousands of runs share a handful of configurations
def of_row(extracted: str | None) -> RunConfiguration:
    """The configuration from the JSON array that `SQL` extracts (None: the row's JSON is damaged)."""
    if extracted is None:
        return UNKNOWN
    try:
        fields = RunFields(*json.loads(extracted))
    except (ValueError, TypeError):
        return UNKNOWN
    if isinstance(fields.overrides, str):  # json_extract returns an object as its JSON text
        try:
            fields = fields._replace(overrides=json.loads(fields.overrides))
        except ValueError:
            fields = fields._replace(overrides=None)
    return _configuration(fields)


def _configuration(f: RunFields) -> RunConfiguration:
    if f.command == "probe":
        return RunConfiguration("probe", "-", False)
    has_invocation = f.invocation is not None
    preset = _nonempty_str(f.preset if has_invocation else f.config_preset)
    model = _nonempty_str(f.model if has_invocation else f.model_id)
    if has_invocation and model is None and preset == VERDICT_PRESET:  # envbuild's record: the preset's model
        model = VERDICT_MODEL
    if has_invocation:
        # SQLite's json_extract gives JSON booleans as 1 / 0
        decides = (
            preset == VERDICT_PRESET
            and model == VERDICT_MODEL
            and f.overrides == {}
            and f.bundled in (True, 1)
            and f.probes not in (False, 0)
        )
    else:  # written before `invocation`: the preset as it stands shows in its config, model and data file
        decides = (
            preset in (None, VERDICT_PRESET)
            and model in (None, VERDICT_MODEL)
            and f.max_steps is None
            and f.min_accuracy in (None, LEGACY_SMOKE_BAR)
            and (f.path is None or posixpath.basename(str(f.path)) == BUNDLED_DATA)
        )
    if decides:
        return RunConfiguration(preset or VERDICT_PRESET, model or VERDICT_MODEL, True)
    if has_invocation:
        changes = _override_changes(f.overrides)
        own_data = f.bundled in (True, 1) or (preset == SPEED_PRESET and f.data_name == SPEED_DATA)
        changes += () if own_data else (f"data={_label_value(f.data_name) if f.data_name else '?'}",)
        changes += ("no probes",) if f.probes in (False, 0) else ()
    else:
        changes = tuple(
            f"{name}={_label_value(value)}"
            for name, value in (("max_steps", f.max_steps), ("min_accuracy", f.min_accuracy))
            if value is not None and not (name == "min_accuracy" and value == LEGACY_SMOKE_BAR)
        )
        if f.path is not None and posixpath.basename(str(f.path)) != BUNDLED_DATA:
            changes += (f"data={_label_value(posixpath.basename(str(f.path)))}",)
    return RunConfiguration(preset or "?", model or "?", False, changes)


#: Overrides a label names at most (the rest are summed up as "+N more"), and characters per value.
MAX_CHANGES = 4
MAX_VALUE = 40


def _override_changes(overrides) -> tuple[str, ...]:
    """`name=value` per override, sorted by name (a value that is not text is shown as JSON), bounded."""
    if not isinstance(overrides, dict):
        return ("overrides=?",) if overrides not in (None, {}) else ()
    items = [
        f"{_label_value(name)}={_label_value(value)}"
        for name, value in sorted(overrides.items(), key=lambda kv: str(kv[0]))
    ]
    if len(items) > MAX_CHANGES:
        items = items[:MAX_CHANGES] + [f"+{len(items) - MAX_CHANGES} more"]
    return tuple(items)


def _label_value(value) -> str:
    """A value as a label shows it: text as it is, anything else as JSON; one line, at most MAX_VALUE characters."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    text = " ".join(text.split())
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


def _nonempty_str(value) -> str | None:
    return value if isinstance(value, str) and value else None
