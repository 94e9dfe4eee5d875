"""How a BuildKit build looks on the terminal (stderr): the engine's build events (builder.workflows.image re-exports
them) rendered with rich. A spinner shows the running step and its last output line while BuildKit runs; each
step that finishes, or comes from the cache, gets one line. Step names and output come from the build log: they are
made plain (no control character, one line) and escaped before rich sees them."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from builder.slug import plain
from builder.workflows.image import (
    BuildEnded,
    Building,
    Built,
    Pushed,
    Pushing,
    Recorded,
    RemoteLooked,
    Skipped,
    StepFinished,
    StepRunning,
)

#: The longest step name shown; a longer one ends in "...".
STEP_WIDTH = 110
#: How much of a running step's last output line is shown.
LAST_LINE_WIDTH = 80


class BuildView:
    """Renders the events of one or more builds in turn on `console`; `show` says whether an event was one of
    them."""

    def __init__(self, console: Console):
        self.console = console
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def show(self, event: object) -> bool:
        console = self.console
        if isinstance(event, StepRunning):
            if self._progress is not None:
                last = f"  [dim]{escape(plain(event.last[:LAST_LINE_WIDTH]))}[/]" if event.last is not None else ""
                self._progress.update(self._task, description=f"{_step(event.step)}{last}")
        elif isinstance(event, StepFinished):
            mark = "[dim]cached[/]" if event.cached else "[green]done[/]"
            console.print(f"  {mark} {_step(event.step)}")
        elif isinstance(event, Building):
            console.print(
                f"building [bold]{escape(event.tag)}[/] with {escape(event.tool)}; full log: {escape(str(event.log_path))}"
            )
            self._start()
        elif isinstance(event, BuildEnded):
            self._stop()
        elif isinstance(event, Built):
            console.print(f"[green]built[/] {escape(event.tag)} in {event.seconds:.1f}s")
        elif isinstance(event, Skipped):
            console.print(
                f"[green]skipped[/]: image [bold]{escape(event.tag)}[/] already exists {event.where} "
                f"(content hash unchanged, {event.image_id[:19]}); --force rebuilds it"
            )
        elif isinstance(event, RemoteLooked):
            console.print(
                f"[green]pulled[/] {escape(event.tag)}: its content-hash tag exists in the registry"
                if event.pulled
                else f"{escape(event.tag)} cannot be pulled ({escape(plain(event.why))}); building it"
            )
        elif isinstance(event, Recorded):
            _print_recorded(event, console)
        elif isinstance(event, Pushing):
            console.print(f"pushing {escape(event.tag)}")
        elif isinstance(event, Pushed):
            console.print(f"[green]pushed[/] {escape(event.tag)}")
        else:
            return False
        return True

    def _start(self) -> None:
        """The spinner, until the build client exits (BuildEnded); it leaves no line behind."""
        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=self.console, transient=True
        )
        self._progress.start()
        self._task = self._progress.add_task("starting BuildKit", total=None)

    def _stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        self._progress = self._task = None


def _step(name: str) -> str:
    """A step's name on one line, cut to STEP_WIDTH, escaped."""
    name = " ".join(plain(name).split())
    return escape(name if len(name) <= STEP_WIDTH else name[: STEP_WIDTH - 3] + "...")


def _print_recorded(recorded: Recorded, console: Console) -> None:
    """Where the build was filed, and how to send its build record home."""
    console.print(f"recorded the build in {escape(str(recorded.db))}; attempt: {escape(str(recorded.directory))}")
    if recorded.build_record is not None:
        record = escape(str(recorded.build_record))
        console.print(
            f"build record: {record} (send it home: `envbuild matrix publish {record} --name NAME --sign KEY "
            "--command ...`)"
        )
