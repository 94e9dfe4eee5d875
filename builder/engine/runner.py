"""The run routes' one interface: a `Runner` takes its route's request record and a `notify` callback and returns how
the run ended (run_result.RunEnd). builder.engine.routes holds the table of routes and picks one.

What a runner tells while it runs goes to `notify`, never to a console: a `Said` line, the workload's `Output` as it
comes, or a plain line (str) about the Python environment a run on this host takes (uv's own lines among them). The
CLI renders them; text from an image or a venv in them is plain text, which the CLI escapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal, Protocol, TypeVar

if TYPE_CHECKING:
    from builder.engine.run_result import RunEnd

#: Where a runner's events go (Said, Output, or a plain str line).
Notify = Callable[[object], None]


@dataclass(frozen=True)
class Said:
    """A line envbuild says about the run (plain text); `level` says how much it matters."""

    text: str
    level: Literal["info", "warning", "error"] = "info"


@dataclass(frozen=True)
class Output:
    """What the workload printed, to be shown as it came: a container's or a SIF's (bounded, scrubbed and its control
    characters escaped by run_output.RunLog), or, `here`, a run's on this host, line by line."""

    text: str
    here: bool = False


@dataclass(frozen=True)
class RunRequest:
    """One workload run: what to run, on which devices, with which inputs, and where results go."""

    out_dir: Path
    preset: str = "smoke"
    model: str | None = None  # hub id or local path
    data: Path | None = None
    gpus: str | None = None  # "all" | "0,1"
    extra_args: list[str] = field(default_factory=list)
    site_recipes: Path | None = None  # the site's recipe folder over the packaged recipes (envbuild --recipes)


@dataclass(frozen=True)
class ContainerRun(RunRequest):
    """A run in a Docker image (`--image`): one envbuild built, or one it did not (then the options below)."""

    image: str = ""
    shm_size: str = "16g"
    network: str | None = None
    python: str = "python3"  # the interpreter of an image envbuild did not build
    wheels: Path | None = None  # where the packages such an image lacks come from (None: pip's index here)
    probe_timeout: float = 300.0  # seconds the probe of such an image may take
    pass_hf_token: bool = False  # hand such an image the Hugging Face token (it can read it)


@dataclass(frozen=True)
class SifRun(RunRequest):
    """A run in a SIF with Apptainer (`--apptainer`): one `envbuild sif` made, or one it did not."""

    sif: Path = Path()
    network: str | None = None  # a SIF envbuild did not build runs offline (HF_HUB_OFFLINE, PIP_NO_INDEX) without it
    python: str = "python3"  # the interpreter of a SIF envbuild did not build
    wheels: Path | None = None  # where the packages such a SIF lacks come from (None: pip's index here)
    probe_timeout: float = 300.0  # seconds the probe of such a SIF may take
    pass_hf_token: bool = False  # hand such a SIF the Hugging Face token (it can read it)


@dataclass(frozen=True)
class VenvRun(RunRequest):
    """A run on this host in a Python environment envbuild did not build (`--venv`, `--local --python PATH`)."""

    venv: Path = Path()
    wheels: Path | None = None  # where the packages it lacks come from (None: pip's index here)


R = TypeVar("R", bound=RunRequest, contravariant=True)


class Runner(Protocol[R]):
    """A run route: runs the workload as `request` asks and says how it ended; bad input is a RunError (nothing was
    recorded), an interrupt of the workload ends the run `interrupted` (an interrupt before it started passes)."""

    def run(self, request: R, notify: Notify) -> RunEnd: ...
