"""builder/engine/run_result.py: what a run leaves before its result is checked: the output folder (`check_out_dir`),
the command that reproduces the run (`envbuild_invocation`), the run's end (`run_end`) and the JSON writes."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from builder.engine.run_result import (
    RESULT_FILE,
    check_out_dir,
    envbuild_invocation,
    run_end,
    utc_iso,
    write_json_atomic,
)
from builder.engine.runner import ContainerRun, RunRequest


def test_utc_iso_is_the_second_in_utc():
    assert utc_iso(0) == "1970-01-01T00:00:00Z"
    assert utc_iso(1_800_000_000.9) == "2027-01-15T08:00:00Z"


def test_write_json_atomic_keeps_the_key_order_indents_by_two_and_ends_with_a_newline(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")
    write_json_atomic(target, {"b": 1, "a": [2]})
    assert target.read_text() == '{\n  "b": 1,\n  "a": [\n    2\n  ]\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_check_out_dir_makes_the_folder_and_returns_it_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    made = check_out_dir(Path("runs/one"))
    assert made == tmp_path / "runs" / "one" and made.is_dir() and made.is_absolute()
    assert list(made.iterdir()) == []  # the write test leaves nothing
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert check_out_dir(Path("~/out")) == tmp_path / "home" / "out"


def test_check_out_dir_keeps_other_files_but_refuses_an_earlier_result(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    assert check_out_dir(tmp_path) == tmp_path
    (tmp_path / RESULT_FILE).write_text("{}")
    with pytest.raises(FileExistsError, match=r"result\.json exists from an earlier run; pass a fresh --out"):
        check_out_dir(tmp_path)


def test_an_out_dir_that_cannot_be_made_is_a_permission_error_that_names_it(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(PermissionError, match=r"output dir .*/file/out is not writable \(Not a directory\)"):
        check_out_dir(tmp_path / "file" / "out")


def test_a_run_here_is_reproduced_with_local_and_no_user_paths(tmp_path):
    invocation = envbuild_invocation(RunRequest(out_dir=tmp_path / "private" / "out"), None)
    assert invocation == {
        "envbuild": ["envbuild", "run", "workload", "--local", "--preset", "smoke"],
        "preset": "smoke",
        "model": None,
        "data": {"name": "emotions.jsonl", "bundled": True, "sha256": None},
        "overrides": {},
        "probes": True,
    }


def test_an_image_run_names_its_image_inputs_and_workload_arguments(tmp_path):
    data = tmp_path / "secret-folder" / "mine.jsonl"
    data.parent.mkdir()
    data.write_bytes(b'{"text": "x", "label": "joy"}\n')
    request = ContainerRun(
        out_dir=tmp_path / "out",
        preset="full",
        model="org/model",
        data=data,
        gpus="0,1",
        extra_args=["--no-probes", "--max-steps", "8"],
        image="envbuild/x:1",
    )
    invocation = envbuild_invocation(request, "envbuild/x:1")
    assert invocation["envbuild"] == [
        *("envbuild", "run", "workload", "--image", "envbuild/x:1", "--preset", "full", "--model", "org/model"),
        *("--data", "mine.jsonl", "--gpus", "0,1", "--", "--no-probes", "--max-steps", "8"),
    ]
    assert invocation["data"] == {
        "name": "mine.jsonl",
        "bundled": False,
        "sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
    }
    assert (invocation["model"], invocation["overrides"], invocation["probes"]) == ("org/model", None, False)
    assert "secret-folder" not in json.dumps(invocation)


def test_a_data_file_that_is_not_there_has_no_data_block(tmp_path):
    invocation = envbuild_invocation(RunRequest(out_dir=tmp_path, data=tmp_path / "gone.jsonl"), None)
    assert invocation["data"] is None and invocation["envbuild"][-2:] == ["--data", "gone.jsonl"]


def test_run_end_is_finished_now_unless_the_caller_knows_when(tmp_path):
    before = time.time()
    end = run_end(tmp_path, "container_died", "exit 137", 12.0, versions={"python": "3.11"}, host={"os": "x"})
    assert before <= end.finished <= time.time()
    assert (end.out_dir, end.failure_class, end.failure, end.started) == (tmp_path, "container_died", "exit 137", 12.0)
    assert (end.versions, end.host) == ({"python": "3.11"}, {"os": "x"})
    assert (end.image, end.invocation, end.environment, end.written_by_image, end.contradicts) == (None,) * 5


def test_run_end_keeps_every_field_it_is_given(tmp_path):
    def contradicts(result):
        return None

    end = run_end(
        tmp_path,
        None,
        "",
        1.0,
        versions={},
        host={},
        image={"tag": "t"},
        invocation={"preset": "smoke"},
        environment={"kind": "venv"},
        written_by_image=tmp_path / "image-out",
        contradicts=contradicts,
        finished=5.0,
    )
    assert (end.finished, end.image, end.invocation, end.environment) == (
        5.0,
        {"tag": "t"},
        {"preset": "smoke"},
        {"kind": "venv"},
    )
    assert end.written_by_image == tmp_path / "image-out" and end.contradicts is contradicts


def test_run_end_s_blocks_are_named_never_positional(tmp_path):
    """versions, host, image... are all dicts: a call cannot put one in another's place by position."""
    with pytest.raises(TypeError, match="positional argument"):
        run_end(tmp_path, None, "", 1.0, {"python": "3.11"}, {"os": "x"})
