"""The result schema: each crafted result is refused by field path and rule, real results pass unchanged."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builder.store.result_schema import MAX_TEXT, ResultSchemaError, clean_text, rules_markdown, validate
from matrix_fixtures import cpu_result, failed_result, make_result

REPO = Path(__file__).resolve().parents[2]
REAL_RESULTS = sorted([*REPO.glob("results/**/result.json"), *REPO.glob("tests/data/**/*.json")])


def _set(path: str, value):
    """A make_result() with the dotted `path` set to `value`."""
    result = make_result()
    *parents, last = path.split(".")
    node = result
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return result


# (field, value, what the message must say): one crafted result each.
REPROS = [
    ("config", "x", r"config: Input should be a valid dictionary"),
    ("metrics", [], r"metrics: Input should be a valid dictionary"),
    ("metrics.eval_before", "bad", r"metrics.eval_before: Input should be a valid dictionary"),
    ("metrics.curves", "x", r"metrics.curves: Input should be a valid dictionary"),
    ("metrics.curves.train_loss.0", [1, 2.0, 3], r"metrics.curves.train_loss.0: List should have at most 2 items"),
    ("metrics.curves.train_loss.0", [1], r"metrics.curves.train_loss.0: List should have at least 2 items"),
    ("metrics.curves.train_loss.0", ["a", 1.0], r"metrics.curves.train_loss.0: .*step that is an integer"),
    ("metrics.curves.train_loss.0", [1, 1e308], r"metrics.curves.train_loss.0.1: number must be finite and within"),
    ("metrics.samples_per_s", -1e308, r"metrics.samples_per_s: number must be finite and within"),
    ("metrics.samples_per_s", float("nan"), r"metrics.samples_per_s: number must be finite"),
    ("metrics.tokens_per_s", float("inf"), r"metrics.tokens_per_s: number must be finite"),
    ("metrics.samples_per_s", "<script>", r"metrics.samples_per_s: Input should be a valid (integer|number)"),
    ("hardware.gpu_count", "many", r"hardware.gpu_count: Input should be a valid integer"),
    ("hardware.gpu_count", True, r"hardware.gpu_count: Input should be a valid integer"),
    ("finished_at", 17, r"finished_at: Input should be a valid string"),
    ("finished_at", "9999-12-31T23:59:59Z", r"finished_at: .*must lie between 2020-01-01 and now"),
    ("started_at", "1970-01-01T00:00:00Z", r"started_at: .*must lie between"),
    ("finished_at", "yesterday", r"finished_at: .*RFC 3339 UTC"),
    ("finished_at", "2026-12-02T13:00:41+02:00", r"finished_at: .*RFC 3339 UTC"),
    ("finished_at", "2026-02-30T13:00:41Z", r"finished_at: .*not a valid date"),
    ("run_id", 12345, r"run_id: Input should be a valid string"),
    ("run_id", "../../etc", r"run_id: String should match pattern"),
    ("error", "x" * 2**20, r"error: string longer than 4096 characters"),
    ("host", {"hostname": "h" * 2**20}, r"host.hostname: string longer than 4096 characters"),
    ("config", {"preset": {"nested": 1}}, r"config.preset: Input should be a valid string"),
    ("versions", {"python": 3.11, "torch": "2.4"}, r"versions.python: Input should be a valid string"),
    ("probes", [{"name": "x", "status": "maybe"}], r"probes.0.status: Input should be 'pass', 'fail' or 'skip'"),
    ("probes", "x", r"probes: Input should be a valid list"),
    ("schema_version", "1", r"schema_version: Input should be 1"),
    ("status", "ok", r"status: Input should be 'pass', 'fail' or 'error'"),
    ("invocation", {"probes": "yes"}, r"invocation.probes: Input should be a valid boolean"),
    ("invocation", {"envbuild": "envbuild run"}, r"invocation.envbuild: Input should be a valid list"),
    ("invocation", {"data": {"sha256": "../x"}}, r"invocation.data.sha256: String should match pattern"),
]


@pytest.mark.parametrize("field, value, message", REPROS, ids=[f"{f}={str(v)[:20]}" for f, v, _ in REPROS])
def test_each_crafted_result_is_refused_naming_field_and_rule(field, value, message):
    with pytest.raises(ResultSchemaError) as err:
        validate(_set(field, value))
    assert re.search(message, str(err.value)), str(err.value)


def test_deep_nesting_is_refused_without_recursion_error():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(ResultSchemaError, match=r"host\.x(\.0)+: nested deeper than 16 levels"):
        result = make_result()
        result["host"] = {"x": deep}  # not via make_result: its deepcopy recurses
        validate(result)


def test_a_failure_needs_a_class():
    with pytest.raises(ResultSchemaError, match="a result that did not pass needs an error_class"):
        validate(make_result(status="fail"))


def test_control_and_bidi_characters_are_removed_everywhere():
    result = make_result(error="loss \u202eNaN\x00 at\x1b[31m step 3\nnext line\tend")
    result["probes"][0]["message"] = "a\u2066b\x07c"
    result["host"] = {"os\x1b": "Debian\u200f 12"}
    out = validate(result)
    assert out["error"] == "loss NaN at[31m step 3\nnext line\tend"
    assert out["probes"][0]["message"] == "abc"
    assert out["host"] == {"os": "Debian 12"}
    assert clean_text("\u061c\u200e\u202a\u2069ok\x7f\x9f") == "ok"


@pytest.mark.parametrize("path", REAL_RESULTS, ids=lambda p: str(p.relative_to(REPO)))
def test_committed_real_results_pass_unchanged(path):
    raw = json.loads(path.read_text())
    assert validate(raw) == raw


@pytest.mark.parametrize("result", [make_result(), cpu_result(), failed_result()])
def test_fixture_results_pass_unchanged(result):
    assert validate(result) == result


def test_docs_table_is_generated_from_the_model():
    docs = (REPO / "docs" / "result-schema.md").read_text()
    table = docs.split("<!-- result-schema-rules:start -->\n")[1].split("<!-- result-schema-rules:end -->")[0]
    assert table == rules_markdown(), "regenerate the table: python -m builder.store.result_schema"


def test_every_documented_block_key_is_a_model_field():
    """The example result in docs/result-schema.md uses only keys the model names (or open blocks)."""
    docs = (REPO / "docs" / "result-schema.md").read_text()
    example = docs.split("```jsonc\n")[1].split("```")[0]
    fields = {line.split("`")[1].split(".")[0] for line in rules_markdown().splitlines()[2:]}
    top_level = set(re.findall(r'^  "(\w+)":', example, re.M))
    assert top_level and top_level <= fields, top_level - fields


# ---- properties -----------------------------------------------------------------------------
_json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=50)
)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)
_paths = st.sampled_from(
    [
        "config",
        "metrics",
        "metrics.samples_per_s",
        "metrics.curves",
        "metrics.curves.train_loss",
        "metrics.curves.train_loss.0",
        "metrics.eval_after",
        "metrics.eval_after.accuracy",
        "hardware",
        "hardware.gpu_count",
        "finished_at",
        "started_at",
        "run_id",
        "status",
        "error_class",
        "error",
        "probes",
        "probes.0",
        "probes.0.values",
        "probes.0.name",
        "versions",
        "versions.torch",
        "image",
        "host",
        "command",
        "schema_version",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=_paths, value=_json)
def test_any_mutation_is_valid_or_a_schema_error(path, value):
    """Replace one field with any JSON value: the result validates, or a ResultSchemaError names the field."""
    try:
        out = validate(_set(path, value))
    except ResultSchemaError as err:
        assert err.problems and all(": " in p for p in err.problems)
        return
    json.dumps(out, allow_nan=False)  # what passed is plain, finite JSON
    assert all(len(s) <= MAX_TEXT for s in _strings(out))


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_a_real_run_with_the_speed_levers_passes_and_hostile_lever_fields_do_not(tmp_path):
    """A CPU run of the throughput levers records varlen_attention/varlen_error and merged_qkv/merged_qkv_blocks in
    config.speed (an open block): the real result passes unchanged; the same keys with NaN, a string past MAX_TEXT
    or a bidi control are refused by the field's path, or cleaned."""
    import copy
    import math

    from workload.training.presets import PRESETS
    from workload_fixtures import quick_train

    budget = PRESETS["throughput"]
    code, result = quick_train(
        tmp_path,
        max_steps=1,
        tokens_per_step=budget.tokens_per_step,
        pack=True,
        pack_length=budget.pack_length,
        varlen_attention=True,
        merged_qkv=True,
    )
    assert code == 0, result.get("error")
    result = json.loads((tmp_path / "result.json").read_text())  # what the door reads: the written file
    speed = result["config"]["speed"]
    assert speed["merged_qkv"] is True and speed["merged_qkv_blocks"] > 0 and speed["varlen_error"]
    assert validate(result) == result
    for key, value, message in (
        ("merged_qkv_blocks", math.nan, "must be finite"),
        ("varlen_error", "x" * (MAX_TEXT + 1), f"longer than {MAX_TEXT}"),
    ):
        hostile = copy.deepcopy(result)
        hostile["config"]["speed"][key] = value
        with pytest.raises(ResultSchemaError, match=rf"config\.speed\.{key}: .*{message}"):
            validate(hostile)
    hostile = copy.deepcopy(result)
    hostile["config"]["speed"]["varlen_error"] = "no kernel\u202e\x1b[31m"
    assert validate(hostile)["config"]["speed"]["varlen_error"] == "no kernel[31m"
