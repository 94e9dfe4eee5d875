"""The run configuration rule (builder/store/run_config.py, docs/matrix.md "Verdict runs and measurements"), edge
by edge: which runs decide a cell and what a measurement's label says, the same from a result.json as from the
columns SQLite extracts out of a stored row (what `matrix list` and the report read). Fast: no CLI, no training."""

from __future__ import annotations

import json
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builder.store import run_config
from matrix_fixtures import cpu_result

SMOKE = {
    "preset": "smoke",
    "model": "tiny-gemma",
    "overrides": {},
    "probes": True,
    "data": {"name": "emotions.jsonl", "bundled": True, "sha256": "ab" * 32},
}


def from_row(result_json: str) -> run_config.RunConfiguration:
    """The configuration as the store reads it: run_config.SQL run by SQLite over a stored result_json."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE TABLE runs (result_json TEXT)")
        conn.execute("INSERT INTO runs VALUES (?)", (result_json,))
        (extracted,) = conn.execute(f"SELECT {run_config.SQL} FROM runs").fetchone()
    finally:
        conn.close()
    return run_config.of_row(extracted)


def both(result: dict) -> run_config.RunConfiguration:
    """of_result(result), checked to be what the store's columns give for the same stored JSON."""
    config = run_config.of_result(result)
    assert from_row(json.dumps(result)) == config
    return config


def new(**invocation) -> dict:
    """A result written by envbuild (with `invocation`): the smoke preset as it stands, with `invocation` changes."""
    return cpu_result(invocation={**SMOKE, **invocation})


def legacy(
    config: dict | None = None, model: str | None = "tiny-gemma", path: str | None = "/d/emotions.jsonl", **changes
) -> dict:
    """A result written before `invocation`: judged by its config, model id and dataset path."""
    result = cpu_result(
        config={"preset": "smoke", "seed": 1, **(config or {})}, model={"id": model}, dataset={"path": path}, **changes
    )
    result.pop("invocation", None)
    return result


@pytest.mark.parametrize(
    "changes, label, decides",
    [
        ({}, "smoke · tiny-gemma", True),
        ({"model": None}, "smoke · tiny-gemma", True),  # envbuild's record of the preset's own model
        ({"model": ""}, "smoke · tiny-gemma", True),
        ({"preset": "seed", "model": None}, "seed · ?", False),  # only smoke's model is implied
        ({"preset": "speed"}, "speed · tiny-gemma", False),  # names that sort after smoke's are no smoke either
        ({"model": "zephyr"}, "smoke · zephyr", False),
        ({"preset": None}, "? · tiny-gemma", False),
        ({"preset": ""}, "? · tiny-gemma", False),
        ({"overrides": None}, "smoke · tiny-gemma", False),  # a record without overrides is not "none overridden"
        ({"overrides": {"lr": 0.001}}, "smoke · tiny-gemma · lr=0.001", False),
        ({"data": {"name": "emotions.jsonl", "bundled": False}}, "smoke · tiny-gemma · data=emotions.jsonl", False),
        ({"data": {"name": "mine.jsonl"}}, "smoke · tiny-gemma · data=mine.jsonl", False),
        ({"data": {"bundled": False}}, "smoke · tiny-gemma · data=?", False),
        ({"data": None}, "smoke · tiny-gemma · data=?", False),
        ({"probes": False}, "smoke · tiny-gemma · no probes", False),
        ({"probes": None}, "smoke · tiny-gemma", True),  # only an explicit --no-probes turns them off
        (
            {"preset": "seed", "probes": False, "overrides": {"max_steps": 3}, "data": {"name": "x.jsonl"}},
            "seed · tiny-gemma · max_steps=3 · data=x.jsonl · no probes",
            False,
        ),
        (
            {"preset": "speed", "model": "gemma-2b-shape", "data": {"name": "synthetic", "bundled": False}},
            "speed · gemma-2b-shape",
            False,
        ),
        ({"preset": "speed", "data": {"name": "other", "bundled": False}}, "speed · tiny-gemma · data=other", False),
        # a name sorting after the speed preset's own "synthetic" is other data too
        ({"preset": "speed", "data": {"name": "tokens", "bundled": False}}, "speed · tiny-gemma · data=tokens", False),
        (
            {"preset": "seed", "data": {"name": "synthetic", "bundled": False}},
            "seed · tiny-gemma · data=synthetic",
            False,
        ),
    ],
)
def test_a_run_with_invocation_decides_only_as_the_smoke_preset_stands(changes, label, decides):
    config = both(new(**changes))
    assert (config.label, config.decides) == (label, decides)


def test_a_probe_run_is_its_own_configuration():
    config = both(cpu_result(command="probe", invocation=SMOKE))
    assert (config.preset, config.model, config.decides, config.label) == ("probe", "-", False, "probe · -")


@pytest.mark.parametrize(
    "config, model, path, label, decides",
    [
        ({}, "tiny-gemma", "/d/emotions.jsonl", "smoke · tiny-gemma", True),
        ({"preset": None}, None, None, "smoke · tiny-gemma", True),  # nothing says otherwise: the preset as it stood
        ({"min_accuracy": 0.45}, "tiny-gemma", "emotions.jsonl", "smoke · tiny-gemma", True),
        ({"min_accuracy": None, "max_steps": None}, "tiny-gemma", "/d/emotions.jsonl", "smoke · tiny-gemma", True),
        ({"preset": "seed"}, "tiny-gemma", "/d/emotions.jsonl", "seed · tiny-gemma", False),
        ({"preset": "speed"}, "tiny-gemma", "/d/emotions.jsonl", "speed · tiny-gemma", False),
        ({}, "zephyr", "/d/emotions.jsonl", "smoke · zephyr", False),
        ({}, "/tmp/g2b", "/d/emotions.jsonl", "smoke · /tmp/g2b", False),
        ({"max_steps": 0}, "tiny-gemma", "/d/emotions.jsonl", "smoke · tiny-gemma · max_steps=0", False),
        ({"min_accuracy": 0.5}, "tiny-gemma", "/d/emotions.jsonl", "smoke · tiny-gemma · min_accuracy=0.5", False),
        ({"max_steps": 8, "min_accuracy": 0.45}, "tiny-gemma", None, "smoke · tiny-gemma · max_steps=8", False),
        ({}, "tiny-gemma", "/d/emotions.jsonl.bak", "smoke · tiny-gemma · data=emotions.jsonl.bak", False),
        ({}, "tiny-gemma", "/emotions.jsonl/mine.jsonl", "smoke · tiny-gemma · data=mine.jsonl", False),
        ({}, "tiny-gemma", "/d/a.jsonl", "smoke · tiny-gemma · data=a.jsonl", False),  # sorts before emotions.jsonl
        ({"max_steps": 2}, "tiny-gemma", "/d/x.jsonl", "smoke · tiny-gemma · max_steps=2 · data=x.jsonl", False),
        ({"preset": ""}, "", "/d/emotions.jsonl", "smoke · tiny-gemma", True),  # empty names are no names
        ({"preset": "", "max_steps": 1}, "", "/d/emotions.jsonl", "? · ? · max_steps=1", False),
    ],
)
def test_a_result_written_before_invocation_is_judged_by_its_config(config, model, path, label, decides):
    result = legacy(config, model, path)
    if model is None:
        result.pop("model")
    if path is None:
        result.pop("dataset")
    got = both(result)
    assert (got.label, got.decides) == (label, decides)


@pytest.mark.parametrize("block", ["config", "model", "dataset"])
def test_a_legacy_block_that_is_not_an_object_is_read_as_absent(block):
    """Blocks the schema leaves open (model, dataset) or an older store kept: a non-object says nothing."""
    result = legacy({"max_steps": 3}, "seed-model", "/d/mine.jsonl")
    result[block] = ["not", "an", "object"]
    expected = {
        "config": "? · seed-model · data=mine.jsonl",
        "model": "smoke · ? · max_steps=3 · data=mine.jsonl",
        "dataset": "smoke · seed-model · max_steps=3",
    }[block]
    assert run_config.of_result(result).label == expected


def test_an_invocation_or_data_that_is_not_an_object_is_read_as_absent():
    result = legacy({"max_steps": 3})
    result["invocation"] = "smoke"  # not an invocation: the legacy rule, from config
    assert run_config.of_result(result).label == "smoke · tiny-gemma · max_steps=3"
    assert run_config.of_result(new(data="emotions.jsonl")).label == "smoke · tiny-gemma · data=?"


@pytest.mark.parametrize(
    "count, shown",
    [
        (4, ["a0=v", "a1=v", "a2=v", "a3=v"]),
        (5, ["a0=v", "a1=v", "a2=v", "a3=v", "+1 more"]),
        (9, ["a0=v", "a1=v", "a2=v", "a3=v", "+5 more"]),
    ],
)
def test_a_label_names_four_overrides_then_counts_the_rest(count, shown):
    overrides = {f"a{i}": "v" for i in reversed(range(count))}  # sorted by name, not by insertion
    config = both(new(preset="seed", overrides=overrides))
    assert list(config.changes) == shown


@pytest.mark.parametrize(
    "value, shown",
    [
        ("x" * 40, "x" * 40),
        ("x" * 41, "x" * 39 + "…"),
        ("a  b\n\tc", "a b c"),
        ({"b": [1, 2], "a": None}, '{"a": null, "b": [1, 2]}'),
        (True, "true"),
        (None, "null"),
        (1.5, "1.5"),
    ],
)
def test_an_override_value_is_shown_short_on_one_line(value, shown):
    config = both(new(preset="seed", overrides={"opt": value}))
    assert config.changes == (f"opt={shown}",)
    assert len(config.changes[0]) <= len("opt=") + run_config.MAX_VALUE


def test_a_long_override_name_is_shortened_too():
    config = both(new(preset="seed", overrides={"n" * 50: 1}))
    assert config.changes == ("n" * 39 + "…=1",)


def test_overrides_that_are_not_an_object_are_named_unknown():
    """Only an older store could hold them (the schema wants an object): the label still says something changed."""
    result = new(overrides=["max_steps", 3])
    assert (run_config.of_result(result).label, run_config.of_result(result).decides) == (
        "smoke · tiny-gemma · overrides=?",
        False,
    )
    assert run_config.of_result(new(overrides=0)).label == "smoke · tiny-gemma · overrides=?"
    assert run_config.of_result(new(overrides={})).label == "smoke · tiny-gemma"


def _extracted(**values) -> str:
    """The JSON array run_config.SQL extracts, FIELDS in order, with `values` (keyed by the field's name)."""
    row = {name: None for name in run_config.FIELDS} | {"invocation": {}}
    row |= {name: value for name, value in values.items() if name in row}
    return json.dumps(list(row.values()))


def test_a_damaged_row_is_unknown_and_keeps_its_own_verdict():
    assert from_row("{not json") is run_config.UNKNOWN
    assert run_config.UNKNOWN.decides is True and run_config.UNKNOWN.label == "? · ?"
    assert run_config.of_row(None) is run_config.UNKNOWN
    for extracted in ("[1, 2]", "not json", "{}", "null"):
        assert run_config.of_row(extracted) is run_config.UNKNOWN


def test_a_row_stored_as_sqlite_gives_booleans_as_integers():
    """SQLite's json_extract of one path gives JSON true/false as 1/0: the rule reads them as booleans."""
    decided = run_config.of_row(
        _extracted(command="train", preset="smoke", model="tiny-gemma", overrides={}, bundled=1, probes=1)
    )
    assert (decided.label, decided.decides) == ("smoke · tiny-gemma", True)
    off = run_config.of_row(
        _extracted(command="train", preset="smoke", model="tiny-gemma", overrides={}, bundled=1, probes=0)
    )
    assert (off.label, off.decides) == ("smoke · tiny-gemma · no probes", False)
    other = run_config.of_row(
        _extracted(
            command="train",
            preset="smoke",
            model="tiny-gemma",
            overrides={},
            bundled=0,
            probes=1,
            data_name="mine.jsonl",
        )
    )
    assert (other.label, other.decides) == ("smoke · tiny-gemma · data=mine.jsonl", False)


def test_overrides_extracted_as_json_text_are_parsed():
    text = run_config.of_row(
        _extracted(command="train", preset="seed", model="m", overrides='{"lr": 0.1}', bundled=True, probes=True)
    )
    assert text.label == "seed · m · lr=0.1"
    broken = run_config.of_row(
        _extracted(command="train", preset="seed", model="m", overrides="{lr", bundled=True, probes=True)
    )
    assert broken.label == "seed · m"
    legacy_row = run_config.of_row(json.dumps([None] * len(run_config.FIELDS)))
    assert (legacy_row.label, legacy_row.decides) == ("smoke · tiny-gemma", True)


# ---- the two readings agree for any stored result --------------------------------------------------------------
_names = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "",
            "smoke",
            "seed",
            "speed",
            "tiny-gemma",
            "gemma-2b-shape",
            "synthetic",
            "emotions.jsonl",
            "/d/emotions.jsonl",
            "x y",
        ]
    ),
)
_values = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(0, 1), _names, st.lists(st.integers(0, 3), max_size=2)
)
_invocation = st.fixed_dictionaries(
    {},
    optional={
        "preset": _names,
        "model": _names,
        "probes": st.one_of(st.none(), st.booleans()),
        "overrides": st.one_of(
            st.none(), st.dictionaries(st.sampled_from(["lr", "max_steps", "seed", "a", "b", "c"]), _values, max_size=6)
        ),
        "data": st.one_of(
            st.none(),
            st.fixed_dictionaries({}, optional={"name": _names, "bundled": st.one_of(st.none(), st.booleans())}),
        ),
    },
)


@settings(max_examples=200, deadline=None)
@given(
    command=st.sampled_from(["train", "probe"]),
    invocation=st.one_of(st.none(), _invocation),
    config=st.fixed_dictionaries(
        {},
        optional={
            "preset": _names,
            "max_steps": st.one_of(st.none(), st.integers(0, 9)),
            "min_accuracy": st.one_of(st.none(), st.sampled_from([0.0, 0.45, 0.5])),
        },
    ),
    model=_names,
    path=_names,
)
def test_the_stored_row_reads_as_the_result_does(command, invocation, config, model, path):
    """Whatever a result holds, `matrix list` (the store's extracted columns) and the report (the result.json) give
    it the same configuration, and only the smoke preset as it stands decides."""
    result = cpu_result(command=command, config=config, model={"id": model}, dataset={"path": path})
    if invocation is not None:
        result["invocation"] = invocation
    config_ = both(result)
    if config_.decides:
        assert config_.label == run_config.VERDICT_LABEL and config_.changes == ()
