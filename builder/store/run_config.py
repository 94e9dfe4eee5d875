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

VERDICT_PRESET = "smoke"
VERDICT_MODEL = "tiny-gemma"
BUNDLED_DATA = "emotions.jsonl"
VERDICT_LABEL = f"{VERDICT_PRESET} · {VERDICT_MODEL}"
#: The standard speed measurement (docs/workload.md "The speed preset") and the data it makes itself.
SPEED_PRESET, SPEED_DATA = "speed", "synthetic"
#: The smoke preset's own pass bar, how a result written before `invocation` shows it ran the preset as it stands.
LEGACY_SMOKE_BAR = 0.45

#: The result fields the rule reads, as SQLite JSON paths (`MatrixStore.run_events` extracts them, guarded by
#: json_valid so a damaged row is read without them).
FIELDS = (
    "$.command",
    "$.invocation.preset",
    "$.invocation.model",
    "$.invocation.overrides",
    "$.invocation.data.bundled",
    "$.invocation.probes",
    "$.config.preset",
    "$.model.id",
    "$.config.max_steps",
    "$.config.min_accuracy",
    "$.dataset.path",
    "$.invocation",
    "$.invocation.data.name",
)
#: One json_extract with every path parses the stored JSON once (one call per path parsed it 12 times: most of
#: `matrix list`'s time at 10,000 runs); it returns the values as one JSON array.
SQL = "CASE WHEN json_valid(result_json) THEN json_extract(result_json, {}) END".format(
    ", ".join(f"'{path}'" for path in FIELDS)
)


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
        result.get("command"),
        invocation is not None,
        (invocation or {}).get("preset"),
        (invocation or {}).get("model"),
        (invocation or {}).get("overrides"),
        data.get("bundled"),
        (invocation or {}).get("probes"),
        config.get("preset"),
        model.get("id"),
        config.get("max_steps"),
        config.get("min_accuracy"),
        dataset.get("path"),
        data.get("name"),
    )


@functools.lru_cache(maxsize=1024)  # thousands of runs share a handful of configurations
def of_row(extracted: str | None) -> RunConfiguration:
    """The configuration from the JSON array that `SQL` extracts (None: the row's JSON is damaged)."""
    if extracted is None:
        return UNKNOWN
    try:
        (
            command,
            preset,
            model,
            overrides,
            bundled,
            probes,
            config_preset,
            model_id,
            max_steps,
            min_accuracy,
            path,
            invocation,
            data_name,
        ) = json.loads(extracted)
    except (ValueError, TypeError):
        return UNKNOWN
    if isinstance(overrides, str):  # json_extract returns an object as its JSON text
        try:
            overrides = json.loads(overrides)
        except ValueError:
            overrides = None
    return _configuration(
        command,
        invocation is not None,
        preset,
        model,
        overrides,
        bundled,
        probes,
        config_preset,
        model_id,
        max_steps,
        min_accuracy,
        path,
        data_name,
    )


def _configuration(
    command,
    has_invocation,
    preset,
    model,
    overrides,
    bundled,
    probes,
    config_preset,
    model_id,
    max_steps,
    min_accuracy,
    path,
    data_name=None,
) -> RunConfiguration:
    if command == "probe":
        return RunConfiguration("probe", "-", False)
    preset = _text(preset if has_invocation else config_preset)
    model = _text(model if has_invocation else model_id)
    if has_invocation and model is None and preset == VERDICT_PRESET:  # envbuild's record: the preset's model
        model = VERDICT_MODEL
    if has_invocation:
        # SQLite's json_extract gives JSON booleans as 1 / 0
        decides = (
            preset == VERDICT_PRESET
            and model == VERDICT_MODEL
            and overrides == {}
            and bundled in (True, 1)
            and probes not in (False, 0)
        )
    else:  # written before `invocation`: the preset as it stands shows in its config, model and data file
        decides = (
            preset in (None, VERDICT_PRESET)
            and model in (None, VERDICT_MODEL)
            and max_steps is None
            and min_accuracy in (None, LEGACY_SMOKE_BAR)
            and (path is None or posixpath.basename(str(path)) == BUNDLED_DATA)
        )
    if decides:
        return RunConfiguration(preset or VERDICT_PRESET, model or VERDICT_MODEL, True)
    if has_invocation:
        changes = _override_changes(overrides)
        own_data = bundled in (True, 1) or (preset == SPEED_PRESET and data_name == SPEED_DATA)
        changes += () if own_data else (f"data={_short(data_name) if data_name else '?'}",)
        changes += ("no probes",) if probes in (False, 0) else ()
    else:
        changes = tuple(
            f"{name}={_short(value)}"
            for name, value in (("max_steps", max_steps), ("min_accuracy", min_accuracy))
            if value is not None and not (name == "min_accuracy" and value == LEGACY_SMOKE_BAR)
        )
        if path is not None and posixpath.basename(str(path)) != BUNDLED_DATA:
            changes += (f"data={_short(posixpath.basename(str(path)))}",)
    return RunConfiguration(preset or "?", model or "?", False, changes)


#: Overrides a label names at most (the rest are summed up as "+N more"), and characters per value.
MAX_CHANGES = 4
MAX_VALUE = 40


def _override_changes(overrides) -> tuple[str, ...]:
    """`name=value` per override, sorted by name (a value that is not text is shown as JSON), bounded."""
    if not isinstance(overrides, dict):
        return ("overrides=?",) if overrides not in (None, {}) else ()
    items = [f"{_short(name)}={_short(value)}" for name, value in sorted(overrides.items(), key=lambda kv: str(kv[0]))]
    if len(items) > MAX_CHANGES:
        items = items[:MAX_CHANGES] + [f"+{len(items) - MAX_CHANGES} more"]
    return tuple(items)


def _short(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    text = " ".join(text.split())
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


def _text(value) -> str | None:
    return value if isinstance(value, str) and value else None
