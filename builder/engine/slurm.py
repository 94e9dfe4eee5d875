"""Slurm: the matrix as one job array of Apptainer tasks, and the tasks' end states read back with `sacct`.

`submission(...)` plans the tasks (one per SIF x configuration) and renders a readable sbatch script: a
`case` on SLURM_ARRAY_TASK_ID naming each task's cell, SIF, output directory and workload arguments, so
that the script alone says what runs. Compute nodes need Apptainer only: the workload lives in the SIF,
and envbuild completes each task's result.json when it collects (builder.workflows.slurm_collect). End states
map onto error classes by the table STATE_CLASSES (docs/matrix.md "Slurm end states").

Every value that reaches the script is checked where it enters: site values against `_TOKEN`, paths against
`_PATH` (no spaces, quotes, newlines, commas or colons: they also become Apptainer binds), cell keys by
`Cell.from_key` (and against the SIF record's own coordinates), configuration names against `_CONFIG_NAME`;
and every word of a task's command line is `shlex.quote`d, but for the one bind envbuild writes itself.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tomllib
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from builder.engine.apptainer import APPTAINER_FAILED, OUT_BIND, exec_argv, exit_failure, read_sidecar
from builder.engine.container import RunError, input_error_line
from builder.plan.cells import Cell
from builder.slug import safe_slug

SITE_FILE = Path("envbuild") / "site.toml"
SCRIPT_NAME, SUBMISSION_NAME = "job.sbatch", "submission.json"
#: Values that go into the script verbatim (#SBATCH lines, module names): no spaces, quotes or newlines.
_TOKEN = re.compile(r"[A-Za-z0-9_.:=,/+@%-]{1,200}")
_CONFIG_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
_JOB_ID = re.compile(r"[0-9]{1,12}")
#: A path that goes into the script or an Apptainer bind: absolute, no spaces, quotes, newlines, commas or colons.
_PATH = re.compile(r"/[A-Za-z0-9_./+@%=-]{0,1000}")
#: The one word of a task's command line that is not quoted: the output bind, which expands "$out".
_OUT_BIND_WORD = '"$out":' + OUT_BIND


def checked_path(value: Path | str, what: str) -> Path:
    """`value` as an absolute path that is safe in the script and in an Apptainer bind; SlurmError naming `what`."""
    text = str(Path(value).absolute()) if str(value) else ""
    if not _PATH.fullmatch(text) or "/../" in text + "/":
        raise SlurmError(
            f"{what} {str(value)[:200]!r}: a path here may hold only letters, digits and _./+@%=- "
            "(no spaces, quotes, newlines, commas, colons or ..)"
        )
    return Path(text)


#: Slurm end state -> (error class, counts as a verdict?). COMPLETED leaves the verdict to the result itself.
#: Written rules: docs/matrix.md "Slurm end states".
STATE_CLASSES: dict[str, tuple[str, bool]] = {
    "FAILED": ("container_died", True),
    "OUT_OF_MEMORY": ("oom_killed", True),
    "TIMEOUT": ("slurm_timeout", False),
    "DEADLINE": ("slurm_timeout", False),
    "NODE_FAIL": ("slurm_node_fail", False),
    "BOOT_FAIL": ("slurm_node_fail", False),
    "PREEMPTED": ("slurm_preempted", False),
    "CANCELLED": ("slurm_cancelled", False),
}
#: States of a task that has not ended yet: collected later.
UNFINISHED = frozenset(
    {
        "PENDING",
        "RUNNING",
        "REQUEUED",
        "RESIZING",
        "SUSPENDED",
        "COMPLETING",
        "CONFIGURING",
        "STAGE_OUT",
        "SIGNALING",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "SPECIAL_EXIT",
        "STOPPED",
        "RESV_DEL_HOLD",
        "REVOKED",
    }
)


def _checked_field(value: Path, what: str) -> Path:
    """`checked_path` for a pydantic validator: its refusal as the ValueError pydantic reports."""
    try:
        return checked_path(value, what)
    except SlurmError as exc:
        raise ValueError(str(exc)) from None


class SlurmError(RuntimeError):
    """Bad site settings, a Slurm command that failed, or output that does not parse."""


class Site(BaseModel):
    """Site settings: options, or the [slurm] table of $XDG_CONFIG_HOME/envbuild/site.toml."""

    model_config = ConfigDict(extra="forbid")
    partition: str | None = None
    account: str | None = None
    time: str = "01:00:00"
    gpus: str | None = None
    gres: str | None = None
    cpus_per_task: int | None = Field(default=None, ge=1, le=1024)
    mem: str | None = None
    modules: list[str] = []
    results_dir: Path | None = None

    @field_validator("partition", "account", "time", "gpus", "gres", "mem")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        if value is not None and not _TOKEN.fullmatch(value):
            raise ValueError(f"{value!r} is not a plain Slurm value (letters, digits and _.:=,/+@%- only)")
        return value

    @field_validator("modules")
    @classmethod
    def _modules(cls, value: list[str]) -> list[str]:
        for name in value:
            cls._token(name)
        return value

    @field_validator("results_dir")
    @classmethod
    def _results_dir(cls, value: Path | None) -> Path | None:
        return None if value is None else _checked_field(value, "results_dir")


def site_file(config_home: Path | None = None) -> Path:
    base = config_home or Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / SITE_FILE


def load_site(options: dict, path: Path | None = None) -> Site:
    """Site settings: the site file's [slurm] table (if the file exists), overridden by the given options."""
    path = path or site_file()
    values: dict = {}
    if path.is_file():
        try:
            values = tomllib.loads(path.read_text(encoding="utf-8")).get("slurm") or {}
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise SlurmError(f"{path}: not valid TOML ({exc})") from None
        if not isinstance(values, dict):
            raise SlurmError(f"{path}: [slurm] must be a table")
    try:
        Site(**values)  # every value of the file is checked, also the ones an option overrides
        values.update({k: v for k, v in options.items() if v not in (None, (), [])})
        return Site(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise SlurmError(
            f"site setting {'.'.join(map(str, first['loc']))}: {first['msg']} (options, or [slurm] in {path})"
        ) from None


class Task(BaseModel):
    """One array task: a cell's SIF with one configuration of the workload."""

    model_config = ConfigDict(extra="forbid")
    index: int = Field(ge=0)
    cell: str
    config: str = Field(pattern=rf"^{_CONFIG_NAME.pattern}$")
    sif: Path
    sif_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    flavor: str = Field(pattern=r"^[a-z]{1,16}$")
    args: list[str]
    out_dir: Path

    @field_validator("cell")
    @classmethod
    def _cell(cls, value: str) -> str:
        return Cell.from_key(value).key  # ValueError for anything that is not a cell key, "../" included

    @field_validator("out_dir")
    @classmethod
    def _out_dir(cls, value: Path) -> Path:
        return _checked_field(value, "task directory")

    @field_validator("args")
    @classmethod
    def _args(cls, value: list[str]) -> list[str]:
        if any("\x00" in a for a in value):
            raise ValueError("a workload argument holds a NUL byte")
        return value


class Submission(BaseModel):
    """What `slurm submit` wrote into its attempt directory (submission.json), read back by `collect`."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1] = 1
    id: str = Field(pattern=r"^[0-9a-f]{12}$")
    created_at: str
    results_dir: Path
    site: Site
    tasks: list[Task]
    jobs: list[dict] = []  # {"job_id": "12", "array": "0-2"} per sbatch call, the first one first
    images: dict[str, dict]  # sif sha256 -> the image block of its record

    @field_validator("results_dir")
    @classmethod
    def _results_dir(cls, value: Path) -> Path:
        return _checked_field(value, "results_dir")


def parse_configs(values: tuple[str, ...]) -> dict[str, list[str]]:
    """`NAME=ARGS` (ARGS split like a shell) per --config; none means one configuration, "default"."""
    configs: dict[str, list[str]] = {}
    for value in values or ("default=",):
        name, sep, args = value.partition("=")
        if not sep or not _CONFIG_NAME.fullmatch(name):
            raise SlurmError(
                f"--config {value!r}: use NAME=WORKLOAD-ARGS with a lowercase NAME (e.g. smoke='--max-steps 4')"
            )
        if name in configs:
            raise SlurmError(f"--config {name} is given twice")
        try:
            configs[name] = shlex.split(args)
        except ValueError as exc:
            raise SlurmError(f"--config {value!r}: {exc}") from None
        if any(a == "--out" or a.startswith("--out=") for a in configs[name]):
            raise SlurmError(f"--config {name}: --out is set per task by envbuild")
    return configs


def plan(
    submission_id: str, sifs: list[Path], configs: dict[str, list[str]], site: Site, created_at: str
) -> Submission:
    """The tasks: every SIF (its record checked) with every configuration, numbered from 0."""
    if site.results_dir is None:
        raise SlurmError(
            "no results directory: pass --results-dir (a directory the compute nodes can write "
            "and this machine can read), or set results_dir in the site file"
        )
    results = checked_path(Path(site.results_dir).resolve(), "results_dir") / submission_id
    tasks, images = [], {}
    for sif in sifs:
        sif = Path(sif).resolve()
        try:
            record = read_sidecar(sif)
        except RunError as exc:
            raise SlurmError(str(exc)) from None
        manifest = record["image"]["manifest"]
        cell = _record_cell(sif, manifest)
        images[record["sha256"]] = record["image"]
        for name, args in configs.items():
            index = len(tasks)
            try:
                tasks.append(
                    Task(
                        index=index,
                        cell=cell.key,
                        config=name,
                        sif=sif,
                        sif_sha256=record["sha256"],
                        flavor=cell.flavor,
                        args=args,
                        out_dir=results / f"{index}-{safe_slug(cell.key)}-{name}",
                    )
                )
            except ValidationError as exc:
                raise SlurmError(f"{sif}: {exc.errors()[0]['msg']}") from None
    if not tasks:
        raise SlurmError("no tasks: pass at least one --sif")
    return Submission(
        id=submission_id, created_at=created_at, results_dir=results, site=site, tasks=tasks, images=images
    )


def _record_cell(sif: Path, manifest: dict) -> Cell:
    """The cell a SIF record names: its `cell_key` by `Cell.from_key`, and the same cell as its coordinates."""
    key = manifest.get("cell_key")
    try:
        cell = Cell.from_key(key)
        if isinstance(manifest.get("cell"), dict) and Cell(**manifest["cell"]).key != cell.key:
            raise ValueError(f"cell_key {key!r} is not the cell its coordinates name")
    except (ValueError, TypeError) as exc:
        first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise SlurmError(
            f"{sif}: its record names no valid cell ({first[:300]}); make the SIF again with `envbuild sif`"
        ) from None
    return cell


def render_script(sub: Submission, array: str | None = None) -> str:
    """The sbatch script: site settings as #SBATCH lines, one `case` branch per task."""
    site = sub.site
    lines = [
        "#!/bin/bash",
        f"# envbuild slurm submission {sub.id}: {len(sub.tasks)} task(s), one per cell x configuration.",
        "# Each task runs the workload inside its cell's SIF with Apptainer and leaves result.json and",
        "# container.log in its directory; `envbuild slurm collect JOBID` completes and records them.",
        f"#SBATCH --job-name=envbuild-{sub.id}",
        f"#SBATCH --array={array or f'0-{len(sub.tasks) - 1}'}",
        f"#SBATCH --time={site.time}",
        f"#SBATCH --output={sub.results_dir.parent}/slurm-{sub.id}-%A_%a.out",
    ]
    for key, flag in (
        ("partition", "partition"),
        ("account", "account"),
        ("gpus", "gpus"),
        ("gres", "gres"),
        ("cpus_per_task", "cpus-per-task"),
        ("mem", "mem"),
    ):
        if getattr(site, key) is not None:
            lines.append(f"#SBATCH --{flag}={getattr(site, key)}")
    lines += ["set -uo pipefail", ""]
    lines += [f"module load {shlex.quote(name)}" for name in site.modules]
    lines += ['case "$SLURM_ARRAY_TASK_ID" in']
    for task in sub.tasks:
        argv = exec_argv(
            "apptainer",
            task.sif,
            task.flavor,
            None,
            [_OUT_BIND_WORD],  # [1:]: "$runtime" runs it
            ["python3", "-m", "workload", "train", "--out", OUT_BIND, *task.args],
        )[1:]
        bind_at = argv.index(_OUT_BIND_WORD)  # the bind envbuild wrote; a workload argument equal to it is quoted
        quoted = " ".join(a if i == bind_at else shlex.quote(a) for i, a in enumerate(argv))
        lines += [
            f"  {task.index})  # {task.cell} / {task.config}",
            f"    out={shlex.quote(str(task.out_dir))}",
            f"    cmd=({quoted}) ;;",
        ]
    lines += [
        '  *) echo "envbuild: no task $SLURM_ARRAY_TASK_ID in this submission" >&2; exit 2 ;;',
        "esac",
        'mkdir -p "$out"',
        'echo "# envbuild: task $SLURM_ARRAY_TASK_ID of job ${SLURM_ARRAY_JOB_ID:-?} on $(hostname)" '
        '>"$out/container.log"',
        "# the node's Apptainer, else its SingularityCE; its --version line goes into the log (and the result)",
        "runtime=$(command -v apptainer || command -v singularity) || {",
        f'  echo "FATAL:   {NO_RUNTIME}" >>"$out/container.log"; exit {APPTAINER_FAILED}; }}',
        f'echo "{RUNTIME_LINE}$("$runtime" --version 2>&1 | head -n 1)" >>"$out/container.log"',
        '"$runtime" "${cmd[@]}" >>"$out/container.log" 2>&1',
        "",
    ]
    return "\n".join(lines)


def sbatch(script: Path, array: str | None, sbatch_cmd: str = "sbatch") -> str:
    """Submit `script` (optionally only the tasks in `array`); returns the job id. The script goes to sbatch on
    its standard input, so the attempt directory need not be readable by whoever sbatch runs as."""
    argv = [sbatch_cmd, "--parsable", *([f"--array={array}"] if array else [])]
    proc = _call(argv, stdin=Path(script).read_text(encoding="utf-8"))
    job_id = proc.strip().split(";")[0]
    if not _JOB_ID.fullmatch(job_id):
        raise SlurmError(f"sbatch answered {proc.strip()!r}, not a job id")
    return job_id


class TaskState(BaseModel):
    """One array task as `sacct` reports it."""

    index: int
    state: str  # the first word: "CANCELLED by 123" -> "CANCELLED"
    exit_code: str
    start: str | None
    end: str | None
    node: str | None


_SACCT_FIELDS = "JobID,State,ExitCode,Start,End,NodeList"
_SACCT_JOB = re.compile(r"(?P<job>[0-9]+)_(?P<index>[0-9]+)")


def sacct(job_id: str, sacct_cmd: str = "sacct") -> dict[int, TaskState]:
    """Each array task's last state, by task index (tasks still pending as a range are not listed)."""
    if not _JOB_ID.fullmatch(job_id):
        raise SlurmError(f"{job_id!r} is not a Slurm job id (digits only)")
    out = _call([sacct_cmd, "-j", job_id, "-X", "-n", "-P", f"--format={_SACCT_FIELDS}"])
    return parse_sacct(out, job_id)


def parse_sacct(text: str, job_id: str) -> dict[int, TaskState]:
    states: dict[int, TaskState] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != 6:
            raise SlurmError(f"sacct line {line!r} does not have the fields {_SACCT_FIELDS}")
        match = _SACCT_JOB.fullmatch(fields[0])
        if not match or match["job"] != job_id:
            continue  # a pending range such as 12_[3-5], or another job
        state = fields[1].split()[0] if fields[1].split() else ""
        if not re.fullmatch(r"[A-Z_]{2,20}", state):
            raise SlurmError(f"sacct state {fields[1]!r} of task {fields[0]} is not a Slurm state")
        states[int(match["index"])] = TaskState(
            index=int(match["index"]),
            state=state,
            exit_code=fields[2],
            start=_sacct_time(fields[3]),
            end=_sacct_time(fields[4]),
            node=fields[5] or None,
        )
    return states


def _sacct_time(text: str) -> str | None:
    try:
        return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None  # "Unknown", "None"


def end_class(state: TaskState, log_text: str) -> tuple[str | None, str]:
    """(error class or None, message) for a finished task; None: the task's own result decides."""
    if state.state == "COMPLETED":
        return None, ""
    code = state.exit_code.split(":")[0]
    if state.state == "FAILED" and code == "2" and any(map(input_error_line, log_text.splitlines())):
        return "usage_error", "the workload refused its input (exit code 2; see container.log)"
    if state.state == "FAILED" and code == str(APPTAINER_FAILED):
        error_class, message = exit_failure(APPTAINER_FAILED, log_text)
        if error_class == "container_error":  # the runtime never started the workload: the node, not the cell
            return error_class, message
    error_class, _ = STATE_CLASSES.get(state.state, ("slurm_lost", False))
    return error_class, f"Slurm ended the task as {state.state} (exit code {state.exit_code})"


def _call(argv: list[str], stdin: str | None = None) -> str:
    try:
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, errors="replace", timeout=120)
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} not found: run this on a Slurm login node (or load the slurm module)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer in 120 s") from None
    if proc.returncode != 0:
        raise SlurmError(f"{' '.join(argv[:2])} failed (exit code {proc.returncode}): {proc.stderr.strip()[-800:]}")
    return proc.stdout


#: What the job script writes into a task's container.log: the node's runtime and its `--version` line, or why
#: there is none (an attempt: `container_error`).
RUNTIME_LINE = "# envbuild: runtime: "
NO_RUNTIME = "envbuild: no apptainer or singularity on this node's PATH (the site file's modules load one)"
