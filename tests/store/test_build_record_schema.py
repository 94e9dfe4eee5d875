"""The build record's door (builder.store.build_record_schema): what `envbuild image` writes passes, and what a
hostile or broken record holds is refused by field path, or cleaned (control and bidi characters)."""

from __future__ import annotations

import copy
import re

import pytest
from hypothesis import given, settings, strategies as st

from builder.store import build_record_schema as schema
from build_record_fixtures import record
from repo import REPO_ROOT

PASS, FAIL = record("pass"), record("fail")


def _problems(doc) -> list[str]:
    with pytest.raises(schema.BuildRecordError) as raised:
        schema.validate(doc)
    return raised.value.problems


def test_a_passing_and_a_failing_record_pass_the_door_unchanged():
    assert schema.validate(copy.deepcopy(PASS)) == PASS
    assert schema.validate(copy.deepcopy(FAIL)) == FAIL
    assert schema.is_build_record(PASS) and not schema.is_build_record({"run_id": "x"})


@pytest.mark.parametrize(
    "change, where",
    [
        ({"status": "pass", "image": None}, "a passing build names its image"),
        ({"status": "pass", "failure": FAIL["failure"]}, "a passing build names its image (image.digest) and no"),
        ({"status": "fail", "failure": None}, "a failed build names its failure"),
        ({"status": "fail", "failure": FAIL["failure"]}, "a failed build tagged no image"),
        ({"status": "done"}, "status"),
        ({"format": "envbuild-result"}, "format"),
        ({"schema_version": 2}, "schema_version"),
        ({"wall_time_s": "570"}, "wall_time_s"),
        ({"context_hash": "C" * 64}, "context_hash"),
        ({"build_id": "../../etc"}, "build_id"),
        ({"image": {"digest": "sha256:zz", "tag": "t"}}, "image.digest"),
        ({"wheelhouse": {"wheelhouse/../../etc/passwd.whl": "a" * 64}}, "wheelhouse"),
        ({"wheelhouse": {"../x.whl": "a" * 64}}, "wheelhouse"),
        ({"ccache": {"measured": True, "hits": 3}}, "ccache"),
        ({"ccache": {"measured": False, "hits": 3, "misses": 1}}, "ccache"),
        ({"request": {**PASS["request"], "torch_source": "auto"}}, "request.torch_source"),
        ({"request": {**PASS["request"], "shell": "rm -rf /"}}, "request.shell"),
        ({"memory": {**PASS["memory"], "peak_bytes": -1}}, "memory.peak_bytes"),
        (
            {
                "compile_jobs": {
                    "max_jobs": 0,
                    "per_job_mb": 4608,
                    "engine_memory_bytes": 1,
                    "engine_cpus": 1,
                    "reason": "",
                }
            },
            "compile_jobs.max_jobs",
        ),
        ({"finished_at": "2019-01-01T00:00:00Z"}, "finished_at"),
        ({"finished_at": "yesterday"}, "finished_at"),
        ({"sbom": {"name": "../sbom.json", "sha256": "a" * 64, "media_type": "application/spdx+json"}}, "sbom.name"),
    ],
)
def test_a_broken_record_is_refused_naming_the_field(change, where):
    doc = {**copy.deepcopy(PASS), **change}
    problems = _problems(doc)
    assert any(where in p for p in problems), problems


def test_a_failure_keeps_at_most_200_lines_of_bounded_text():
    doc = copy.deepcopy(FAIL)
    doc["failure"]["log_tail"] = ["x"] * 201
    assert any("failure.log_tail" in p for p in _problems(doc))
    doc["failure"]["log_tail"] = ["x" * 5000]
    assert any("4096" in p for p in _problems(doc))


def test_control_and_bidi_characters_are_removed_from_every_string():
    doc = copy.deepcopy(FAIL)
    doc["failure"]["log_tail"] = ["\x1b[31mred\x1b[0m \u202eevil", "bell\x07"]
    doc["failure"]["step"] = "RUN \x1b]0;title\x07 step"
    clean = schema.validate(doc)
    assert clean["failure"]["log_tail"] == ["[31mred[0m evil", "bell"]
    assert clean["failure"]["step"] == "RUN ]0;title step"


def test_room_for_what_comes_later_an_sbom_and_a_provenance_link_and_unknown_top_level_keys():
    link = {"name": "sbom.spdx.json", "sha256": "a" * 64, "media_type": "application/spdx+json"}
    doc = {**copy.deepcopy(PASS), "sbom": link, "provenance": {**link, "name": "provenance.intoto.jsonl"}}
    doc["later_field"] = {"kept": True}
    assert schema.validate(doc)["later_field"] == {"kept": True}


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
def test_any_text_in_the_log_tail_is_either_refused_or_comes_back_free_of_controls(text):
    doc = copy.deepcopy(FAIL)
    doc["failure"]["log_tail"] = [text]
    clean = schema.validate(doc)
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", clean["failure"]["log_tail"][0])


def test_the_docs_table_is_the_schema():
    text = (REPO_ROOT / "docs" / "build-record.md").read_text()
    table = text.split("<!-- fields -->\n", 1)[1].split("<!-- /fields -->", 1)[0]
    assert table == schema.markdown(), "regenerate the table: python -m builder.store.build_record_schema"
