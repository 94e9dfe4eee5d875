"""The result schema's bounds, each at its edge (builder/store/result_schema.py, docs/result-schema.md): the last
value allowed passes unchanged, the first one past it is refused naming the field and the rule; and the import door
(`envbuild matrix import`, a real SQLite file) exits 2 with that message and stores nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.store import result_schema
from builder.store.result_schema import ResultSchemaError, validate, validate_build
from matrix_fixtures import make_result

REPO = Path(__file__).resolve().parents[2]


def with_value(path: str, value) -> dict:
    """make_result() with the dotted `path` set to `value` (objects on the way created as needed)."""
    result = make_result()
    *parents, last = path.split(".")
    node = result
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return result


def refusal(raw) -> ResultSchemaError:
    with pytest.raises(ResultSchemaError) as err:
        validate(raw)
    return err.value


def _at(hours: float) -> str:
    return (datetime.now(timezone.utc) + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")


# (path, the last value allowed, the first value refused, what the refusal says)
EDGES = [
    ("error", "x" * 4096, "x" * 4097, r"error: string longer than 4096 characters \(4097\)"),
    (
        "host.note",
        1e15,
        1.0000001e15,
        r"host.note: number must be finite and within ±1e\+15 \(got 1000000100000000\.0\)",
    ),
    ("host.note", -1e15, -1.0000001e15, r"host.note: number must be finite and within"),
    ("host.note", 1e15, 1e15 + 1, r"host.note: number must be finite and within ±1e\+15 \(got 1000000000000001\.0\)"),
    ("host.note", -1e15, -1e15 - 1, r"host.note: number must be finite and within"),
    ("host.note", 2**63 - 1, 2**63, r"host.note: integer outside ±2\^63"),
    ("host.note", -(2**63 - 1), -(2**63), r"host.note: integer outside ±2\^63"),
    ("metrics.eval_after.accuracy", 1, 1.0001, r"metrics.eval_after.accuracy: Input should be less than or equal to 1"),
    ("metrics.eval_after.accuracy", 0, -0.0001, r"metrics.eval_after.accuracy: Input should be greater than or equal"),
    ("metrics.eval_after.macro_f1", 1.0, 1.5, r"metrics.eval_after.macro_f1: Input should be less than or equal to 1"),
    ("metrics.eval_after.loss", 0.0, -1e-9, r"metrics.eval_after.loss: Input should be greater than or equal to 0"),
    ("metrics.eval_after.loss", 1e15, 1.5e15, r"metrics.eval_after.loss: number must be finite"),
    (
        "metrics.samples_per_s",
        1e-9,
        9.9e-10,
        r"metrics.samples_per_s: .*a rate is 0 or at least 1e-09 \(got 9\.9e-10\)",
    ),
    ("metrics.samples_per_s", 0, 5e-324, r"metrics.samples_per_s: .*a rate is 0 or at least"),
    ("metrics.tokens_per_s", 0.0, 1e-12, r"metrics.tokens_per_s: .*a rate is 0"),
    ("metrics.mfu", 1e-9, 1e-10, r"metrics.mfu: .*a rate is 0"),
    ("metrics.steps", 0, -1, r"metrics.steps: Input should be greater than or equal to 0"),
    ("metrics.steps", 2**63 - 1, 1.5, r"metrics.steps: Input should be a valid integer"),
    ("metrics.train_seconds", 0, -0.5, r"metrics.train_seconds: Input should be greater than or equal to 0"),
    ("metrics.peak_memory_allocated_bytes", 0, -1, r"metrics.peak_memory_allocated_bytes: Input should be greater"),
    ("metrics.peak_memory_reserved_bytes", 0, True, r"metrics.peak_memory_reserved_bytes: Input should be a valid int"),
    ("metrics.curves.train_loss", [[0, None], [1, 2], [2, -1.5]], [[-1, 1.0]], r"curves.train_loss.0: .*integer >= 0"),
    ("metrics.curves.train_loss", [[3, 0.5]], [[True, 1.0]], r"curves.train_loss.0: .*a step that is an integer"),
    ("metrics.curves.train_loss", [[3, 0.5]], [[1.0, 1.0]], r"curves.train_loss.0: .*a step that is an integer"),
    ("metrics.curves.train_loss", [[3, 0]], [[1, True]], r"curves.train_loss.0: .*a value that is a number or null"),
    ("metrics.curves.train_loss", [[3, 0]], [[1, "1.0"]], r"curves.train_loss.0: .*a value that is a number or null"),
    ("metrics.curves", {"n" * 200: []}, {"n" * 201: []}, r"metrics.curves: object keys must be strings of at most 200"),
    (
        "metrics.curves",
        {"train_loss": []},
        {"": []},
        r"metrics.curves\.\.\[key\]: String should have at least 1 character",
    ),
    ("hardware.gpu_count", 65_536, 65_537, r"hardware.gpu_count: Input should be less than or equal to 65536"),
    ("hardware.gpu_count", 0, -1, r"hardware.gpu_count: Input should be greater than or equal to 0"),
    ("hardware.peak_tflops", 0, -1, r"hardware.peak_tflops: Input should be greater than or equal to 0"),
    ("hardware.gpu_name", "g" * 200, "g" * 201, r"hardware.gpu_name: String should have at most 200 characters"),
    ("hardware.gpu_name", "g", "", r"hardware.gpu_name: String should have at least 1 character"),
    ("versions.python", "3" + "x" * 63, "3" + "x" * 64, r"versions.python: String should have at most 64 characters"),
    ("versions.torch", "2", "", r"versions.torch: String should have at least 1 character"),
    ("versions.torch", "2.4", "v2.4", r"versions.torch: String should match pattern '\^\[0-9\]'"),
    ("run_id", "r" * 64, "r" * 65, r"run_id: String should have at most 64 characters"),
    ("run_id", "a", "", r"run_id: String should have at least 1 character"),
    ("run_id", "A9_.-z", "-a", r"run_id: String should match pattern"),
    ("run_id", "a.b", "a/b", r"run_id: String should match pattern"),
    ("finished_at", "2020-01-01T00:00:00Z", "2019-12-31T23:59:59Z", r"finished_at: .*must lie between 2020-01-01 and"),
    ("finished_at", "2026-12-02T13:00:41.123456Z", "2026-12-02T13:00:41.1234567Z", r"finished_at: .*RFC 3339 UTC"),
    ("finished_at", "2026-12-02T13:00:41+00:00", "2026-12-02T13:00:41", r"finished_at: .*RFC 3339 UTC"),
    ("finished_at", "2026-12-02T13:00:41Z", " 2026-12-02T13:00:41Z", r"finished_at: .*RFC 3339 UTC"),
    ("started_at", "2026-12-02T13:00:41Z", "2026-12-02T13:00:41Zjunk", r"started_at: .*RFC 3339 UTC"),
    ("started_at", "2026-12-02T23:59:59Z", "2026-12-02T24:00:00Z", r"started_at: .*not a valid date and time"),
    ("wall_time_s", 0, -1, r"wall_time_s: Input should be greater than or equal to 0"),
    ("versions.python", "3", "", r"versions.python: String should have at least 1 character"),
    ("config.world_size", 0, -1, r"config.world_size: Input should be greater than or equal to 0"),
    ("config.seed", -5, 1.0, r"config.seed: Input should be a valid integer"),
    ("invocation.data.sha256", "0f" * 32, "0F" * 32, r"invocation.data.sha256: String should match pattern"),
    ("invocation.data.sha256", "0f" * 32, "0f" * 32 + "0", r"invocation.data.sha256: String should match pattern"),
    ("invocation.argv", ["a"] * 1000, ["a"] * 1001, r"invocation.argv: List should have at most 1000 items"),
    ("invocation.envbuild", ["x" * 4096], ["a"] * 1001, r"invocation.envbuild: List should have at most 1000 items"),
    ("host.gpu_archs", ["gfx90a"] * 1024, ["gfx90a"] * 1025, r"host.gpu_archs: List should have at most 1024 items"),
    ("host.gpus", [{}] * 1024, [{}] * 1025, r"host.gpus: List should have at most 1024 items"),
    (
        "conditions",
        {"contended": False, "contention": ["x"] * 100},
        {"contended": True, "contention": ["x"] * 101},
        r"conditions.contention: List should have at most 100 items",
    ),
    (
        "conditions",
        {"contended": False, "gpu": {"other_processes": [{}] * 1024}},
        {"contended": False, "gpu": {"other_processes": [{}] * 1025}},
        r"conditions.gpu.other_processes: List should",
    ),
    ("conditions", {"contended": False, "cpu_count": 0}, {"contention": []}, r"conditions.contended: Field required"),
    (
        "probes",
        [{"name": "p", "status": "skip"}] * 1000,
        [{"name": "p", "status": "skip"}] * 1001,
        r"probes: List should have at most 1000 items",
    ),
    (
        "metrics.curves.train_loss",
        [[0, 1.0]] * 100_000,
        [[0, 1.0]] * 100_001,
        r"metrics.curves.train_loss: more than 100000 entries",
    ),
]


@pytest.mark.parametrize("path, allowed, refused, message", EDGES, ids=[f"{p}:{str(r)[:16]}" for p, _, r, _ in EDGES])
def test_each_bound_allows_its_edge_and_refuses_past_it(path, allowed, refused, message):
    raw = with_value(path, allowed)
    assert validate(raw) == raw
    err = refusal(with_value(path, refused))
    assert re.search(message, str(err)), str(err)


def test_a_time_may_be_up_to_a_day_ahead_of_this_clock():
    raw = with_value("finished_at", _at(23))
    assert validate(raw) == raw
    err = refusal(with_value("finished_at", _at(25)))
    assert re.search(r"finished_at: .*must lie between 2020-01-01 and now \+ 1 day \(\d{4}-\d\d-\d\dT", str(err))


@pytest.mark.parametrize("depth, refused", [(14, False), (15, True)])
def test_values_nest_at_most_16_levels(depth, refused):
    nested: list = []
    for _ in range(depth - 1):
        nested = [nested]
    raw = with_value("host.x", nested)  # the result is level 0, host 1, host.x 2 ... its innermost list depth + 1
    if not refused:
        assert validate(raw) == raw
    else:
        assert str(refusal(raw)) == "host.x" + ".0" * (depth - 1) + ": nested deeper than 16 levels"


def test_at_most_twenty_problems_are_collected_and_five_shown():
    raw = with_value("host.x", [[float("nan")] for _ in range(30)])
    err = refusal(raw)
    assert (
        len(err.problems) == 20 and err.problems[0] == "host.x.0.0: number must be finite and within ±1e+15 (got nan)"
    )
    assert str(err) == "; ".join(err.problems[:5]) + " (and 15 more)"
    six = refusal(with_value("host.x", [float("inf")] * 6))
    assert len(six.problems) == 6 and str(six).endswith("(got inf) (and 1 more)")
    five = refusal(with_value("host.x", [float("inf")] * 5))
    assert str(five) == "; ".join(five.problems) and "more" not in str(five)
    # one list's own values are all checked, past twenty; no list or object after that is read
    past = refusal(with_value("host.x", [[float("nan")] * 25, [float("nan")], {"y": float("nan")}]))
    assert len(past.problems) == 25 and past.problems[-1].startswith("host.x.0.24: ")


def test_every_bad_value_is_named_not_only_the_first():
    raw = make_result()
    raw["host"] = {"y" * 201: 1, "after": float("nan")}
    assert refusal(raw).problems == [
        "host: object keys must be strings of at most 200 characters",
        "host.after: number must be finite and within ±1e+15 (got nan)",
    ]
    raw = make_result()
    raw["host"] = {1: "a", "z": 2**64}
    assert refusal(raw).problems == [
        "host: object keys must be strings of at most 200 characters",
        "host.z: integer outside ±2^63",
    ]


@pytest.mark.parametrize(
    "raw, message",
    [
        ([make_result()], "(top level): must be a JSON object"),
        ("result", "(top level): must be a JSON object"),
        (None, "(top level): must be a JSON object"),
        ("x" * 4097, "(top level): string longer than 4096 characters (4097)"),
        (float("nan"), "(top level): number must be finite and within ±1e+15 (got nan)"),
        (2**64, "(top level): integer outside ±2^63"),
        ((1, 2), "(top level): not a JSON value (tuple)"),
    ],
)
def test_what_is_not_a_json_object_is_refused_at_the_top_level(raw, message):
    assert refusal(raw).problems == [message]


def test_a_python_value_that_json_cannot_hold_is_refused_by_its_path():
    assert refusal(with_value("host.x", {1, 2})).problems == ["host.x: not a JSON value (set)"]
    assert refusal(with_value("host.x", b"bytes")).problems == ["host.x: not a JSON value (bytes)"]


def test_keys_are_cleaned_like_values_and_clean_text_passes_unchanged():
    raw = with_value("host", {"a\u202eb\x00": "c\u2067d", "tab\tkept": "new\nline"})
    assert validate(raw)["host"] == {"ab": "cd", "tab\tkept": "new\nline"}
    assert validate(raw) is not raw and raw["host"] == {"a\u202eb\x00": "c\u2067d", "tab\tkept": "new\nline"}


@pytest.mark.parametrize(
    "status, error_class, ok",
    [
        ("pass", None, True),
        ("fail", "nan_loss", True),
        ("error", "interrupted", True),
        ("fail", None, False),
        ("error", None, False),
    ],
)
def test_a_result_that_did_not_pass_names_its_class(status, error_class, ok):
    raw = make_result(status=status, error_class=error_class)
    if ok:
        assert validate(raw) == raw
    else:
        (problem,) = refusal(raw).problems
        assert problem.startswith("(top level): a result that did not pass needs an error_class (got {")


def test_a_problem_shows_what_it_got_shortened():
    err = refusal(with_value("hardware.gpu_name", 7))
    assert err.problems == ["hardware.gpu_name: Input should be a valid string (got 7)"]
    long = refusal(with_value("config.preset", ["x" * 100]))
    (problem,) = long.problems
    assert problem == "config.preset: Input should be a valid string (got " + repr(["x" * 100])[:60] + "…)"
    exact = refusal(with_value("config.preset", ["y" * 56]))  # repr is exactly 60 characters: nothing cut
    assert exact.problems == [f"config.preset: Input should be a valid string (got {['y' * 56]!r})"]
    one_over = refusal(with_value("config.preset", ["z" * 57]))  # 61 characters: cut to 60
    assert one_over.problems == [f"config.preset: Input should be a valid string (got {repr(['z' * 57])[:60]}…)"]


def test_a_union_of_numbers_is_named_by_its_field_only():
    err = refusal(with_value("metrics.samples_per_s", "<script>"))
    assert err.problems == [
        "metrics.samples_per_s: Input should be a valid integer (got '<script>')",
        "metrics.samples_per_s: Input should be a valid number (got '<script>')",
    ]


def test_missing_fields_and_choices_do_not_repeat_the_input():
    raw = make_result()
    del raw["versions"]
    raw["command"] = "serve"
    assert refusal(raw).problems == ["command: Input should be 'train' or 'probe'", "versions: Field required"]
    assert refusal(with_value("schema_version", 2)).problems == ["schema_version: Input should be 1"]


def test_unknown_keys_are_kept_and_known_blocks_are_open():
    raw = make_result(extra_block={"anything": [1, "two", None]})
    raw["metrics"]["extra"] = "kept"
    raw["versions"]["rocm_smi"] = "7.0"
    assert validate(raw) == raw


# ---- builds of a merged matrix file --------------------------------------------------------------------------------
BUILD = {
    "build_uid": "a" * 32,
    "status": "pass",
    "created_at": "2026-12-02T13:00:00Z",
    "duration_s": 3.5,
    "manifest": {"cell": {"flavor": "cpu"}},
}


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"status": "fail"}, "(top level): a failed build needs a failure_class"),
        ({"status": "fail", "failure_class": None}, "(top level): a failed build needs a failure_class"),
        ({"status": "fail", "failure_class": ""}, "failure_class: String should have at least 1 character"),
        ({"status": "error", "failure_class": "x"}, "status: Input should be 'pass' or 'fail'"),
        ({"failure_class": "-x"}, "failure_class: String should match pattern"),
        ({"failure_class": "a b"}, "failure_class: String should match pattern"),
        ({"build_uid": "b" * 65}, "build_uid: String should have at most 64 characters"),
        ({"build_uid": ""}, "build_uid: String should have at least 1 character"),
        ({"build_uid": "-b"}, "build_uid: String should match pattern"),
        ({"created_at": None}, "created_at: Input should be a valid string"),
        ({"duration_s": -1}, "duration_s: Input should be greater than or equal to 0"),
    ],
)
def test_a_merged_build_row_is_checked(changes, message):
    with pytest.raises(ResultSchemaError) as err:
        validate_build({**BUILD, **changes})
    assert err.value.problems[0].startswith(message), err.value.problems


def test_a_merged_build_row_passes_cleaned_and_keeps_its_other_columns():
    row = {
        **BUILD,
        "status": "fail",
        "failure_class": "compile_error",
        "error": "x\x1b[2Jy",
        "id": 7,
        "build_uid": "b" * 64,
    }
    assert validate_build(row) == {**row, "error": "x[2Jy"}
    assert validate_build(BUILD) == BUILD
    assert validate_build({**BUILD, "build_uid": "b"})["build_uid"] == "b"


# ---- the table in docs/result-schema.md ---------------------------------------------------------------------------
def test_the_documented_command_prints_the_rules_table():
    table = subprocess.run(
        [sys.executable, "-m", "builder.store.result_schema"], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    assert table == result_schema.rules_markdown()
    imported = subprocess.run(
        [sys.executable, "-c", "import builder.store.result_schema"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    assert imported.stdout == ""  # only the command prints it, not every import (each envbuild command's)
    rows = {line.split(" | ")[0].strip("| `"): line for line in table.splitlines()[2:]}
    assert rows["run_id"] == (
        "| `run_id` | string | required; matches `^[A-Za-z0-9][A-Za-z0-9_.-]*$`; ≤ 64 characters |"
    )
    assert rows["metrics.eval_after.accuracy"] == "| `metrics.eval_after.accuracy` | number or null | 0 … 1 |"
    assert rows["metrics.samples_per_s"] == "| `metrics.samples_per_s` | number or null | 0 … 1e15 |"
    assert rows["hardware.gpu_count"] == "| `hardware.gpu_count` | integer or null | 0 … 65536 |"
    assert rows["metrics.steps"] == "| `metrics.steps` | integer or null | 0 … 2^63-1 |"
    assert rows["status"] == "| `status` | string | required; one of `pass`, `fail`, `error` |"
    assert rows["schema_version"] == "| `schema_version` | integer | required; one of `1` |"
    assert rows["probes[].status"] == "| `probes[].status` | string | required; one of `pass`, `fail`, `skip` |"
    assert rows["host.gpu_archs"] == "| `host.gpu_archs` | list of string or null | ≤ 1024 items |"
    assert rows["conditions.contended"] == "| `conditions.contended` | boolean | required |"


# ---- through the door ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path, value, message",
    [
        ("metrics.samples_per_s", 5e-324, "metrics.samples_per_s: a rate is 0 or at least 1e-09"),
        ("host.x", [[float("inf")] for _ in range(30)], "(and 15 more)"),
        ("error", "x" * 4097, "error: string longer than 4096 characters (4097)"),
    ],
)
def test_the_import_door_refuses_past_a_bound_and_stores_nothing(tmp_path, path, value, message):
    src = tmp_path / "run" / "result.json"
    src.parent.mkdir()
    src.write_text(json.dumps(with_value(path, value)))
    db = tmp_path / "m.db"
    out = CliRunner().invoke(main, ["matrix", "import", str(src), "--db", str(db)])
    assert out.exit_code == 2 and message in out.output, out.output
    assert not db.exists()


def test_the_import_door_stores_a_result_at_every_edge_unchanged(tmp_path):
    raw = make_result()
    raw["error"] = "x" * 4096
    raw["metrics"].update(samples_per_s=1e-9, steps=2**63 - 1)
    raw["hardware"]["gpu_count"] = 65_536
    raw["host"] = {"big": -1e15, "int": -(2**63 - 1)}
    raw["finished_at"] = "2020-01-01T00:00:00Z"
    src = tmp_path / "result.json"
    src.write_text(json.dumps(raw))
    db = tmp_path / "m.db"
    out = CliRunner().invoke(main, ["matrix", "import", str(src), "--db", str(db)])
    assert out.exit_code == 0, out.output
    shown = CliRunner().invoke(main, ["matrix", "export", "--json", "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    (cell,) = json.loads(shown.output)["cells"]
    assert cell["runs"] == [raw]
