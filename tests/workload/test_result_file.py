"""workload/result.py: the result.json envelope, its error-to-pass state (`finish`) and its atomic, strict-JSON
write (`write_result`)."""

from __future__ import annotations

import json
import math
import re
import time
from datetime import datetime, timezone

import pytest

from workload_fixtures import RESULT_KEYS

from workload.result import RESULT_FILE, envelope, finish, new_result, write_result

STARTED = "2026-01-01T00:00:00Z"


def _age_s(stamp: str) -> float:
    then = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    return (datetime.now(timezone.utc) - then).total_seconds()


def test_an_envelope_is_every_key_in_order_in_the_error_state_and_the_schema_reads_it():
    built = envelope("probe", error_class="timeout", error="took too long", started_at=STARTED, wall_time_s=2.5)
    assert list(built) == RESULT_KEYS
    assert built["schema_version"] == 1 and built["command"] == "probe" and built["status"] == "error"
    assert (built["error_class"], built["error"], built["started_at"]) == ("timeout", "took too long", STARTED)
    assert built["finished_at"] is None and built["wall_time_s"] == 2.5 and built["versions"] is None
    assert built["probes"] == [] and built["artifacts"] == {}
    assert re.fullmatch(r"[0-9a-f]{32}", built["run_id"])
    assert envelope("probe", error_class="x", error="y", started_at=STARTED)["run_id"] != built["run_id"]


def test_an_envelope_s_error_and_times_are_named_never_positional():
    """error_class and error are both strings: a call cannot swap them by position."""
    with pytest.raises(TypeError, match="positional argument"):
        envelope("train", "interrupted", "the run did not finish", STARTED)


def test_a_new_result_is_an_interrupted_error_started_now_until_it_finishes():
    result = new_result("train")
    assert result["status"] == "error" and result["error_class"] == "interrupted" and result["command"] == "train"
    assert 0 <= _age_s(result["started_at"]) < 60


def test_finish_pass_clears_the_error_and_stamps_the_end():
    result = new_result("train")
    result["_t0"] = time.perf_counter() - 1.2347  # the run took 1.2347 s (and the few microseconds of this test)
    assert finish(result, "pass", "leftover", "a class a pass never carries") is result
    assert (result["status"], result["error_class"], result["error"]) == ("pass", None, None)
    assert result["wall_time_s"] in (1.235, 1.236)  # rounded to the millisecond
    assert "_t0" not in result and 0 <= _age_s(result["finished_at"]) < 60


def test_finish_fail_and_error_keep_their_class_and_message():
    for status in ("fail", "error"):
        result = finish(new_result("train"), status, "accuracy_below_bar", "0.41 < 0.6")
        assert (result["status"], result["error_class"], result["error"]) == (
            status,
            "accuracy_below_bar",
            "0.41 < 0.6",
        )
        assert 0 <= result["wall_time_s"] < 30


def test_finish_compares_the_status_by_value_not_by_identity():
    """A status read from a file or built at run time is a str equal to "pass", not the interned literal."""
    status = json.loads('"pass"')
    assert status == "pass"
    result = finish(new_result("train"), status, "leftover", "a message a pass never carries")
    assert (result["status"], result["error_class"], result["error"]) == ("pass", None, None)
    assert finish(new_result("train"), "".join(["pa", "ss"]))["status"] == "pass"


def test_finish_of_an_envelope_without_a_start_clock_takes_no_time():
    built = envelope("train", error_class="interrupted", error="x", started_at=STARTED)
    assert finish(built, "pass")["wall_time_s"] == 0.0


@pytest.mark.parametrize(
    "status, error_class, message",
    [
        ("passed", None, "bad status 'passed'"),
        ("fail", None, "needs an error_class"),
        ("error", "", "needs an error_class"),
    ],
)
def test_finish_refuses_an_unknown_status_and_a_verdict_without_a_class(status, error_class, message):
    result = new_result("train")
    with pytest.raises(ValueError, match=message):
        finish(result, status, error_class)
    assert result["status"] == "error" and "_t0" in result  # left as it was


def test_write_result_writes_strict_json_without_private_keys_and_with_non_finite_numbers_as_null(tmp_path):
    result = new_result("train")
    result["metrics"] = {
        "curve": [1.5, math.nan, math.inf, -math.inf, (2.0, math.nan)],
        "loss": math.nan,
        "steps": 8,
        "note": "überprüft",
    }
    out = tmp_path / "a" / "b"  # missing folders are made
    path = write_result(out, finish(result, "pass"))
    assert path == out / RESULT_FILE
    text = path.read_text(encoding="utf-8")
    written = json.loads(text, parse_constant=lambda name: pytest.fail(f"non-JSON constant {name}"))
    assert written["metrics"] == {
        "curve": [1.5, None, None, None, [2.0, None]],
        "loss": None,
        "steps": 8,
        "note": "überprüft",
    }
    assert "überprüft" in text and text.startswith('{\n  "schema_version": 1,\n  "run_id"')  # readable as it is
    assert "_t0" not in written and list(written) == RESULT_KEYS
    assert sorted(p.name for p in out.iterdir()) == [RESULT_FILE]  # no temp file left


def test_write_result_replaces_an_earlier_result_in_the_same_folder(tmp_path):
    write_result(tmp_path, new_result("probe"))
    second = finish(new_result("probe"), "pass")
    write_result(tmp_path, second)
    assert json.loads((tmp_path / RESULT_FILE).read_text())["run_id"] == second["run_id"]


@pytest.mark.parametrize("bad", [{("not", "a string"): 1}, {math.nan: 1}], ids=["tuple-key", "nan-key"])
def test_a_result_json_cannot_hold_leaves_nothing_behind(tmp_path, bad):
    earlier = write_result(tmp_path, new_result("train")).read_text()
    result = new_result("train")
    result["metrics"] = bad
    with pytest.raises((TypeError, ValueError)):
        write_result(tmp_path, result)
    assert sorted(p.name for p in tmp_path.iterdir()) == [RESULT_FILE]  # the temp file is gone
    assert (tmp_path / RESULT_FILE).read_text() == earlier  # the earlier result is untouched
