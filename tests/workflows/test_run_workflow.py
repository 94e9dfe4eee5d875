"""builder/workflows/run.py on a recorded route: the workflow around a run (the matrix checked first, the route's
record of the request, the conditions, the final result, the exit code, the recording, and what a refused or stopped
run leaves), with `routes.run` replaced by one that leaves what a route leaves: the real workload's result of
tests/data/results/smoke-pass.json (or none) and its end (run_end). The routes themselves run in test_run_local.py,
test_venv_route.py, test_run.py and the engine tests."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import signal
import socket
import time
from pathlib import Path

import pytest
from repo import REPO_ROOT

from builder.engine import routes
from builder.engine.container import RunError
from builder.engine.docker import EngineUnavailable
from builder.engine.run_result import RESULT_FILE, check_out_dir, envbuild_invocation, run_end
from builder.engine.runner import ContainerRun, RunRequest, SifRun, VenvRun
from builder.interrupt import Terminated
from builder.store.store import MatrixStore
from builder.workflows import run as run_module
from builder.workflows.errors import BadInput, Failed
from builder.workflows.run import (
    ConditionsNotRecorded,
    NewMatrixFolder,
    NotStarted,
    OtherRuns,
    Recorded,
    RunFinished,
    RunOutcome,
    RunWorkloadRequest,
    TokenPassed,
    run_workload,
)

from workload.training.noise import LOG_NAME as THIRD_PARTY_LOG  # noqa: E402

PASS = json.loads((REPO_ROOT / "tests/data/results/smoke-pass.json").read_text())
HOST = {"hostname": "recorded"}


class Route:
    """routes.run as a route ends: the result it leaves in the checked out folder and how the run ended."""

    def __init__(
        self,
        result: dict | None = PASS,
        failure_class: str | None = None,
        *,
        raises=None,
        during=None,
        image=None,
        raises_in_its_folder=False,
    ):
        self.result, self.failure_class, self.raises, self.during = result, failure_class, raises, during
        self.image, self.raises_in_its_folder = image, raises_in_its_folder
        self.requests: list = []

    def __call__(self, request, notify):
        self.requests.append(request)
        if self.raises is not None and not self.raises_in_its_folder:
            raise self.raises
        out = check_out_dir(request.out_dir)
        if self.raises is not None:  # refused after its folder was made, as a route's check of the model is
            raise self.raises
        failure_class, failure = self.failure_class, "the workload exited with code 9" if self.failure_class else ""
        if self.during is not None:
            try:
                self.during()
            except KeyboardInterrupt:  # a route ends a stopped run `interrupted`
                failure_class, failure = "interrupted", "the run was interrupted"
        if self.result is not None:
            (out / RESULT_FILE).write_text(json.dumps(self.result))
        return run_end(
            out,
            failure_class,
            failure,
            time.time() - 2,
            versions=PASS["versions"],  # what the route knows without the workload
            host=HOST,
            image=self.image,
            invocation=envbuild_invocation(request, None),
        )


@pytest.fixture
def events():
    return []


def _run(monkeypatch, route: Route, events: list, **request):
    monkeypatch.setattr(routes, "run", route)
    return run_workload(RunWorkloadRequest(**request), events.append)


def _recorded_ids(db: Path) -> list[str]:
    with MatrixStore.open(db) as store:
        return [row["result"]["run_id"] for row in store.runs()]


def test_a_pass_is_finished_with_its_host_and_conditions_written_and_recorded(tmp_path, monkeypatch, events):
    out, db = tmp_path / "out", tmp_path / "m.db"
    outcome = _run(monkeypatch, Route(), events, out_dir=out, db=db)
    assert isinstance(outcome, RunOutcome) and outcome.passed and outcome.exit_code == 0 and outcome.stopped_by is None
    assert outcome.out_dir == out.resolve() and outcome.result_path == out.resolve() / RESULT_FILE
    written = json.loads((out / RESULT_FILE).read_text())
    assert written["status"] == "pass" and written["host"] == HOST and written["conditions"]["other_envbuild_runs"] == 0
    assert written == outcome.result
    assert [type(e) for e in events] == [RunFinished, Recorded]
    assert events[0].result_path == outcome.result_path and events[1] == Recorded(db, True)
    assert outcome.recorded.inserted and _recorded_ids(db) == [PASS["run_id"]]
    assert not Path(f"{db}.in-flight").exists()  # this run's marker is gone


def test_a_second_run_is_filed_in_the_existing_matrix(tmp_path, monkeypatch, events):
    db = tmp_path / "m.db"
    _run(monkeypatch, Route(), [], out_dir=tmp_path / "a", db=db)
    second = dict(PASS, run_id="0" * 32)
    outcome = _run(monkeypatch, Route(result=second), events, out_dir=tmp_path / "b", db=db)
    assert events[-1] == Recorded(db, True) and outcome.recorded.inserted
    assert sorted(_recorded_ids(db)) == sorted([PASS["run_id"], "0" * 32])


def test_a_run_that_died_after_a_pass_is_an_error_exit_1_and_recorded(tmp_path, monkeypatch, events):
    db = tmp_path / "m.db"
    outcome = _run(monkeypatch, Route(failure_class="process_died"), events, out_dir=tmp_path / "out", db=db)
    assert not outcome.passed and outcome.exit_code == 1 and outcome.stopped_by is None
    assert outcome.result["error_class"] == "process_died" and _recorded_ids(db) == [PASS["run_id"]]


@pytest.mark.parametrize("sig, code, how", [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")])
def test_a_run_stopped_while_it_ran_is_recorded_interrupted_with_the_signal_s_code(
    tmp_path, monkeypatch, events, sig, code, how
):
    db = tmp_path / "m.db"
    route = Route(result=None, during=lambda: (os.kill(os.getpid(), sig), time.sleep(5)))
    outcome = _run(monkeypatch, route, events, out_dir=tmp_path / "out", db=db)
    assert (outcome.exit_code, outcome.stopped_by) == (code, how) and outcome.result["error_class"] == "interrupted"
    assert _recorded_ids(db) == [outcome.result["run_id"]] and isinstance(events[-1], Recorded)


def test_a_run_the_workload_itself_ended_interrupted_is_a_stopped_run(tmp_path, monkeypatch, events):
    """The workload's own result (tests/data/results/interrupted.json, read back from its file) names the class."""
    stopped = json.loads((REPO_ROOT / "tests/data/results/interrupted.json").read_text())
    route = Route(result=stopped, failure_class="interrupted")
    outcome = _run(monkeypatch, route, events, out_dir=tmp_path / "out", db=tmp_path / "m.db")
    assert (outcome.exit_code, outcome.stopped_by) == (130, "Ctrl-C") and outcome.result["run_id"] == stopped["run_id"]


def test_a_run_that_is_not_recorded_never_touches_a_matrix(tmp_path, monkeypatch, events):
    monkeypatch.chdir(tmp_path)
    outcome = _run(monkeypatch, Route(), events, out_dir=tmp_path / "out", record=False, db=tmp_path / "m.db")
    assert outcome.exit_code == 0 and outcome.recorded is None and [type(e) for e in events] == [RunFinished]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_without_out_a_run_gets_its_own_folder_under_envbuild_runs(tmp_path, monkeypatch, events):
    monkeypatch.chdir(tmp_path)
    first = _run(monkeypatch, Route(), events, record=False)
    second = _run(monkeypatch, Route(), events, record=False)
    assert first.out_dir.parent == second.out_dir.parent == tmp_path / "envbuild-runs"
    assert first.out_dir != second.out_dir and (first.out_dir / RESULT_FILE).is_file()
    assert re.fullmatch(r"20\d{6}T\d{6}Z-[0-9a-f]{6}", first.out_dir.name)  # <UTC time>-<id>


@pytest.mark.parametrize(
    "stop, how, code", [(KeyboardInterrupt(), "Ctrl-C", 130), (Terminated(), "SIGTERM", 143)], ids=["ctrl-c", "sigterm"]
)
def test_a_stop_before_the_workload_started_is_not_started_and_leaves_nothing(
    tmp_path, monkeypatch, events, stop, how, code
):
    db = tmp_path / "m.db"
    try:
        outcome = _run(monkeypatch, Route(raises=stop), events, out_dir=tmp_path / "out", db=db)
    except KeyboardInterrupt:
        pytest.fail("the stop went through run_workload instead of ending the run NotStarted")
    assert outcome == NotStarted(how, code) and events == []
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no in-flight marker, no matrix file


@pytest.mark.parametrize(
    "refusal",
    [RunError("model ./x: no such file"), PermissionError("out not writable"), FileExistsError("result.json exists")],
)
def test_input_the_route_refuses_is_bad_input_and_removes_only_the_empty_folders_this_run_made(
    tmp_path, monkeypatch, refusal
):
    kept = tmp_path / "kept"
    kept.mkdir()
    for out in (tmp_path / "new" / "out", kept / "out"):
        route = Route(raises=refusal, raises_in_its_folder=True)
        with pytest.raises(BadInput, match=str(refusal)):
            _run(monkeypatch, route, [], out_dir=out, db=kept / "m.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"] and list(kept.iterdir()) == []


def test_a_refused_run_keeps_a_folder_that_holds_something(tmp_path, monkeypatch):
    out = tmp_path / "out"

    def refuse_after_writing(request, notify):
        out.mkdir()
        (out / "container.log").write_text("what it said before the refusal")
        raise RunError("refused")

    monkeypatch.setattr(routes, "run", refuse_after_writing)
    with pytest.raises(BadInput):
        run_workload(RunWorkloadRequest(out_dir=out, record=False), lambda event: None)
    assert (out / "container.log").is_file()


def test_no_engine_is_bad_input_and_other_errors_pass_through_without_a_marker(tmp_path, monkeypatch):
    db = tmp_path / "m.db"
    with pytest.raises(BadInput, match="no Docker engine answers"):
        _run(
            monkeypatch, Route(raises=EngineUnavailable("no Docker engine answers")), [], out_dir=tmp_path / "o", db=db
        )
    with pytest.raises(ZeroDivisionError):
        _run(monkeypatch, Route(raises=ZeroDivisionError()), [], out_dir=tmp_path / "o", db=db)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_other_runs_on_the_same_matrix_are_said_before_the_run(tmp_path, monkeypatch, events):
    db = tmp_path / "m.db"
    markers = Path(f"{db}.in-flight")
    markers.mkdir()
    other = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time() - 1, "finished": None}
    (markers / "1-other.json").write_text(json.dumps(other))
    outcome = _run(monkeypatch, Route(), events, out_dir=tmp_path / "out", db=db)
    assert events[0] == OtherRuns(1) and outcome.result["conditions"]["other_envbuild_runs"] == 1


def test_the_token_option_is_said_before_the_run(tmp_path, monkeypatch, events):
    _run(monkeypatch, Route(), events, out_dir=tmp_path / "out", record=False, pass_hf_token=True)
    assert events[0] == TokenPassed()
    events.clear()
    _run(monkeypatch, Route(), events, out_dir=tmp_path / "out2", record=False)
    assert TokenPassed() not in events


def test_each_place_to_run_gets_its_route_s_record_of_the_request(tmp_path, monkeypatch):
    route = Route(raises=RunError("stop here"))
    common = dict(preset="full", model="m", data=tmp_path / "d.jsonl", gpus="0", extra_args=("--no-probes",))
    common.update(site_recipes=tmp_path / "site", python="python3.11", wheels=tmp_path / "w", network="host")
    common.update(probe_timeout=12.0, pass_hf_token=True, shm_size="1g", record=False, out_dir=tmp_path / "out")
    for where in ({"sif": tmp_path / "x.sif"}, {"image": "x:1"}, {"venv": tmp_path / "venv"}, {}):
        with pytest.raises(BadInput):
            _run(monkeypatch, route, [], **common, **where)
    sif, image, venv, here = route.requests
    shared = dict(out_dir=tmp_path / "out", preset="full", model="m", data=tmp_path / "d.jsonl", gpus="0")
    shared.update(extra_args=["--no-probes"], site_recipes=tmp_path / "site")
    foreign = dict(python="python3.11", wheels=tmp_path / "w", probe_timeout=12.0, pass_hf_token=True)
    assert sif == SifRun(**shared, sif=tmp_path / "x.sif", network="host", **foreign)
    assert image == ContainerRun(**shared, image="x:1", shm_size="1g", network="host", **foreign)
    assert venv == VenvRun(**shared, venv=tmp_path / "venv", wheels=tmp_path / "w")
    assert here == RunRequest(**shared) and type(here) is RunRequest


def test_an_empty_venv_path_still_runs_in_a_venv(tmp_path, monkeypatch):
    route = Route(raises=RunError("stop here"))
    with pytest.raises(BadInput):
        _run(monkeypatch, route, [], out_dir=tmp_path / "out", record=False, venv=Path(""))
    assert type(route.requests[0]) is VenvRun


def test_a_result_that_contradicts_what_the_host_read_is_an_input_error_in_the_file(tmp_path, monkeypatch, events):
    route = Route()

    def contradicted(request, notify):
        end = route(request, notify)
        end.contradicts = lambda result: f"the run reported torch {result['versions']['torch']}, its files say 2.0"
        return end

    monkeypatch.setattr(routes, "run", contradicted)
    outcome = run_workload(RunWorkloadRequest(out_dir=tmp_path / "out", record=False), events.append)
    written = json.loads((tmp_path / "out" / RESULT_FILE).read_text())
    assert (written["status"], written["error_class"]) == ("error", "input_error") and "its files say 2.0" in written[
        "error"
    ]
    assert outcome.exit_code == 1 and outcome.result["error_class"] == "input_error"


@pytest.mark.parametrize(
    "make, why",
    [
        (lambda db: db.write_bytes(b""), r"is empty \(0 bytes\), not a matrix database"),
        (lambda db: db.write_text("not a database, just text of some length " * 40), "m.db"),
        (lambda db: db.mkdir(), "m.db"),
    ],
    ids=["empty", "not-sqlite", "a-folder"],
)
def test_an_unusable_matrix_is_bad_input_before_anything_runs(tmp_path, monkeypatch, make, why):
    db = tmp_path / "m.db"
    make(db)
    route = Route()
    with pytest.raises(BadInput, match=rf"cannot use the matrix database .*{why}.*pass --db with a file you can write"):
        _run(monkeypatch, route, [], out_dir=tmp_path / "out", db=db)
    assert route.requests == [] and not (tmp_path / "out").exists()


def test_a_matrix_in_a_folder_under_a_file_is_bad_input(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    route = Route()
    with pytest.raises(BadInput, match=r"file is not a writable folder"):
        _run(monkeypatch, route, [], out_dir=tmp_path / "out", db=tmp_path / "file" / "m.db")
    assert route.requests == []


def test_a_matrix_in_new_folders_is_made_and_said(tmp_path, monkeypatch, events):
    db = tmp_path / "new" / "deeper" / "m.db"
    _run(monkeypatch, Route(), events, out_dir=tmp_path / "out", db=db)
    assert [type(e) for e in events] == [RunFinished, NewMatrixFolder, Recorded]
    assert "new/deeper" in events[1].note and _recorded_ids(db) == [PASS["run_id"]]


def test_a_matrix_that_goes_away_during_the_run_fails_the_recording_and_keeps_the_result(tmp_path, monkeypatch, events):
    db = tmp_path / "m.db"
    with pytest.raises(Failed, match=r"envbuild matrix import .*result\.json` retries"):
        _run(monkeypatch, Route(during=lambda: db.mkdir()), events, out_dir=tmp_path / "out", db=db)
    assert json.loads((tmp_path / "out" / RESULT_FILE).read_text())["status"] == "pass"


def test_a_store_that_refuses_the_run_fails_the_recording_and_keeps_the_result(tmp_path, monkeypatch, events):
    db = tmp_path / "m.db"
    (tmp_path / "envbuild-attempts").write_text("a file where the attempts folder goes")
    with pytest.raises(
        Failed, match=r"cannot create the attempt record .*envbuild matrix import .*result\.json` retries"
    ):
        _run(monkeypatch, Route(), events, out_dir=tmp_path / "out", db=db)
    assert json.loads((tmp_path / "out" / RESULT_FILE).read_text())["status"] == "pass"


def _foreign_image(python: str, torch: str) -> dict:
    """The `image` block of a run in an image envbuild did not build: what its probe read, what the host checked."""
    return {
        "tag": "theirs:1",
        "origin": "foreign",
        "probe": {"python": python, "torch": torch, "torch_hip": None, "torch_cuda": None},
        "checked": {
            "by_host": {"devices_passed": "none", "gpus_seen": {"amd": [], "nvidia": []}},
            "from_image_only": ["versions"],
        },
    }


def test_a_foreign_image_s_result_that_disagrees_with_its_probe_is_bad_input_and_not_recorded(tmp_path, monkeypatch):
    db = tmp_path / "m.db"
    route = Route(image=_foreign_image("3.9.0", "1.0.0"))
    with pytest.raises(BadInput, match="disagrees with what this host checked"):
        _run(monkeypatch, route, [], out_dir=tmp_path / "out", db=db)
    assert not db.exists() and not Path(f"{db}.in-flight").exists()


def test_a_foreign_image_s_run_keeps_the_log_the_image_wrote_in_its_own_folder(tmp_path, monkeypatch):
    """The third-party log of an image envbuild did not build is read from its folder (from-image/), never from
    the run folder, where the image cannot write; a run here keeps the run folder's."""
    for name, image in (
        ("theirs", _foreign_image(PASS["versions"]["python"], PASS["versions"]["torch"])),
        ("ours", None),
    ):
        out, db = tmp_path / name / "out", tmp_path / name / "m.db"
        (out / "from-image").mkdir(parents=True)
        (out / "from-image" / THIRD_PARTY_LOG).write_text("written by the image")
        (out / THIRD_PARTY_LOG).write_text("written here")
        outcome = _run(monkeypatch, Route(image=image), [], out_dir=out, db=db)
        assert outcome.passed and _recorded_ids(db) == [PASS["run_id"]]
        (kept,) = (tmp_path / name / "envbuild-attempts").glob(f"*/{THIRD_PARTY_LOG}")
        assert kept.read_text() == ("written by the image" if image else "written here")


def test_a_run_here_whose_result_names_an_image_is_recorded_without_it(tmp_path, monkeypatch):
    """A run with no image (here, a venv, the managed environment) whose result.json claims one, an image envbuild
    did not build among them: the claim is dropped, so the record names no image nobody checked and the kept log is
    the run folder's."""
    claimed = {**PASS, "image": {"tag": "claimed:1", "origin": "foreign"}, "environment": {"route": "claimed"}}
    out, db = tmp_path / "out", tmp_path / "m.db"
    (out / "from-image").mkdir(parents=True)
    (out / "from-image" / THIRD_PARTY_LOG).write_text("written by the image")
    (out / THIRD_PARTY_LOG).write_text("written here")
    outcome = _run(monkeypatch, Route(result=claimed), [], out_dir=out, db=db)
    assert outcome.passed and "image" not in outcome.result and "environment" not in outcome.result
    assert "image" not in json.loads((out / RESULT_FILE).read_text())
    with MatrixStore.open(db) as store:
        [row] = store.runs()
    assert "image" not in row["result"]
    (kept,) = (tmp_path / "envbuild-attempts").glob(f"*/{THIRD_PARTY_LOG}")
    assert kept.read_text() == "written here"


def test_conditions_that_cannot_be_written_are_said_and_the_run_still_counts(tmp_path, monkeypatch, events):
    write = run_module.write_json_atomic

    def disk_full_for_the_conditions(path, data):
        if "conditions" in data:
            raise OSError(errno.ENOSPC, "No space left on device")
        write(path, data)

    monkeypatch.setattr(run_module, "write_json_atomic", disk_full_for_the_conditions)
    db = tmp_path / "m.db"
    outcome = _run(monkeypatch, Route(), events, out_dir=tmp_path / "out", db=db)
    assert events[0] == ConditionsNotRecorded("[Errno 28] No space left on device")
    assert outcome.exit_code == 0 and "conditions" not in json.loads((tmp_path / "out" / RESULT_FILE).read_text())
    assert _recorded_ids(db) == [PASS["run_id"]]


def _ctrl_c_on(kind):
    def notify(event):
        if isinstance(event, kind):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # the handler runs here (or the signal is ignored)

    return notify


def test_a_stopped_run_is_recorded_however_often_ctrl_c_is_pressed(tmp_path, monkeypatch):
    db = tmp_path / "new" / "m.db"  # a new folder: the recording says so first (where the second Ctrl-C comes)
    monkeypatch.setattr(
        routes, "run", Route(result=None, during=lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(5)))
    )
    try:
        outcome = run_workload(RunWorkloadRequest(out_dir=tmp_path / "out", db=db), _ctrl_c_on(NewMatrixFolder))
    except KeyboardInterrupt:
        pytest.fail("the second Ctrl-C stopped the recording of a stopped run")
    assert outcome.exit_code == 130 and _recorded_ids(db) == [outcome.result["run_id"]]


def test_ctrl_c_while_a_finished_run_is_recorded_stops_the_recording(tmp_path, monkeypatch):
    db = tmp_path / "new" / "m.db"
    monkeypatch.setattr(routes, "run", Route())
    with pytest.raises(KeyboardInterrupt):
        run_workload(RunWorkloadRequest(out_dir=tmp_path / "out", db=db), _ctrl_c_on(NewMatrixFolder))
    assert json.loads((tmp_path / "out" / RESULT_FILE).read_text())["status"] == "pass"  # `matrix import` files it


@pytest.mark.parametrize(
    "value",
    [
        RunWorkloadRequest(),
        TokenPassed(),
        OtherRuns(1),
        ConditionsNotRecorded("x"),
        RunFinished({}, Path("r")),
        NewMatrixFolder("n"),
        Recorded(Path("m.db"), True),
        RunOutcome({}, Path("o"), Path("r"), None, None, 0),
        NotStarted("Ctrl-C", 130),
    ],
    ids=lambda value: type(value).__name__,
)
def test_the_workflow_s_request_events_and_outcomes_are_values(value):
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.anything = 1


def test_a_matrix_path_the_system_refuses_is_bad_input_with_its_reason(tmp_path, monkeypatch):
    route = Route()
    with pytest.raises(BadInput, match=r"cannot use the matrix database .*: File name too long; pass --db"):
        _run(monkeypatch, route, [], out_dir=tmp_path / "out", db=tmp_path / ("m" * 300 + ".db"))
    assert route.requests == []


def test_a_matrix_folder_that_became_a_file_during_the_run_fails_the_recording(tmp_path, monkeypatch):
    db = tmp_path / "d" / "e" / "m.db"  # new folders when the run starts
    with pytest.raises(Failed, match=r"envbuild matrix import .*result\.json` retries"):
        _run(
            monkeypatch,
            Route(during=lambda: (tmp_path / "d").write_text("a file now")),
            [],
            out_dir=tmp_path / "o",
            db=db,
        )
