"""How `envbuild image` shows a build's events (builder.cli.build_view): what the build log says (step names, their
output) reaches the terminal as text, never as rich markup or an escape sequence; the spinner runs from Building to
BuildEnded and leaves no line. Events are fed as the engine tells them (builder.engine.build)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from builder.cli.build_view import STEP_WIDTH, BuildView
from builder.workflows.image import BuildEnded, Building, Built, Recorded, Skipped, StepFinished, StepRunning

HOSTILE = "RUN echo \x1b[2J[bold red]loud[/] \x1b]8;;http://x\x07link"


def _view(terminal: bool) -> tuple[BuildView, io.StringIO]:
    out = io.StringIO()
    return BuildView(Console(file=out, force_terminal=terminal, width=200, soft_wrap=True, color_system=None)), out


def test_a_build_reads_as_it_did_on_a_pipe():
    view, out = _view(terminal=False)
    events = [
        Building("envbuild-test/x:1", "docker buildx build", Path("/tmp/x.build.log")),
        StepRunning("[1/2] FROM base", None),
        StepFinished("[1/2] FROM base", cached=True),
        StepFinished("[2/2]  RUN  make\n  all", cached=False),
        BuildEnded(),
        Built("envbuild-test/x:1", 12.345),
    ]
    assert all(view.show(event) for event in events)
    assert not view.show("a line of the workflow") and not view.show(object())
    assert out.getvalue() == (
        "building envbuild-test/x:1 with docker buildx build; full log: /tmp/x.build.log\n"
        "  cached [1/2] FROM base\n"
        "  done [2/2] RUN make all\n"
        "\n"
        "built envbuild-test/x:1 in 12.3s\n"
    )


def test_what_the_build_log_says_is_shown_as_text():
    view, out = _view(terminal=True)
    view.show(Building("envbuild-test/x:1", "docker build", Path("/tmp/x.build.log")))
    view.show(StepRunning(HOSTILE, "\x1b[31m[bold]out[/]\rback"))
    view.show(StepFinished(HOSTILE, cached=False))
    view.show(StepFinished("RUN " + "x" * 200, cached=True))
    view.show(BuildEnded())
    shown = out.getvalue()
    for sequence in ("\x1b[2J", "\x1b]8", "\x1b[31m", "\x07", "\r\x62ack"):
        assert sequence not in shown
    assert "done RUN echo [2J[bold red]loud[/] ]8;;http://x link\n" in shown  # markup as text, escapes as spaces
    running = "RUN echo [2J[bold red]loud[/] ]8;;http://x link   [31m[bold]out[/] back"
    assert running in shown  # the running step's last line, in the spinner
    assert f"cached {'RUN ' + 'x' * (STEP_WIDTH - 7)}...\n" in shown


def test_the_spinner_ends_with_the_build_and_the_next_build_gets_its_own():
    view, out = _view(terminal=True)
    for tag in ("a:1", "b:1"):
        view.show(Building(tag, "docker build", Path("/tmp/log")))
        assert view._progress is not None and view._progress.live.is_started
        running = view._progress
        view.show(BuildEnded())
        assert view._progress is None and not running.live.is_started
    view.show(StepRunning("after the build", "late"))  # no spinner to update: nothing shown
    assert "after the build" not in out.getvalue()


def test_a_skipped_build_and_a_filed_one_read_as_before():
    view, out = _view(terminal=False)
    view.show(Skipped("envbuild/cpu:abc", "locally", "sha256:0123456789abcdef0123"))
    view.show(Recorded(Path("m.db"), Path("/a/attempt"), Path("/a/attempt/build-record.json")))
    view.show(Recorded(Path("m.db"), Path("/a/other"), None))
    assert out.getvalue().splitlines() == [
        "skipped: image envbuild/cpu:abc already exists locally (content hash unchanged, sha256:0123456789ab); "
        "--force rebuilds it",
        "recorded the build in m.db; attempt: /a/attempt",
        "build record: /a/attempt/build-record.json (send it home: `envbuild matrix publish "
        "/a/attempt/build-record.json --name NAME --sign KEY --command ...`)",
        "recorded the build in m.db; attempt: /a/other",
    ]
