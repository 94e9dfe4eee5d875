"""builder/engine/runner.py: the routes' request records and events are values (a route cannot change the request the
workflow holds, nor an event once sent), and a record made without the CLI gets the CLI's bounds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from builder.engine.runner import ContainerRun, Output, RunRequest, Said, SifRun, VenvRun
from builder.workflows.run import RunWorkloadRequest

RECORDS = [
    Said("hello"),
    Output("a line"),
    RunRequest(out_dir=Path("out")),
    ContainerRun(out_dir=Path("out"), image="x:1"),
    SifRun(out_dir=Path("out"), sif=Path("x.sif")),
    VenvRun(out_dir=Path("out"), venv=Path("venv")),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda record: type(record).__name__)
def test_records_and_events_cannot_be_changed_once_made(record):
    first = dataclasses.fields(record)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, first, None)
    assert getattr(record, first) is not None


def test_an_event_is_plain_information_from_elsewhere_unless_marked():
    assert Said("x").level == "info" and Said("x", "warning").level == "warning"
    assert Output("x").here is False and Output("x", here=True).here is True


@pytest.mark.parametrize("record_type", [ContainerRun, SifRun, VenvRun, RunRequest])
def test_a_route_record_s_defaults_are_the_verb_s(record_type):
    """The options a record and `RunWorkloadRequest` share default alike (out_dir and where it runs are given)."""
    verb = RunWorkloadRequest()
    given = {"out_dir", "image", "sif", "venv"}
    shared = {f.name for f in dataclasses.fields(record_type)} & {f.name for f in dataclasses.fields(verb)} - given
    assert {"preset", "model", "data", "gpus", "extra_args", "site_recipes"} <= shared
    record = record_type(out_dir=Path("out"))
    for name in sorted(shared):
        expected = getattr(verb, name)
        assert getattr(record, name) == (list(expected) if name == "extra_args" else expected), name
