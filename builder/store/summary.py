"""The matrix read model: one verdict per cell (pass / partial / fail / untested) and its history.

Rules (docs/matrix.md "Verdicts"): only verdicts count -- builds and runs that reached the environment
(`verdict_rules.counts`); attempts stopped by the user or failed on the input are listed, never a verdict.
A run's verdict: status "pass" with every probe pass or skip -> "pass"; "pass" with any probe "fail" ->
"partial"; "fail" or "error" -> "fail" (with its error_class). A failed image build is a "fail" too
(class `build:<failure_class>`). Verdicts are about an environment (base image and digest, content
hash): a cell's status is its latest verdict, a flip is two consecutive verdicts of one environment that
differ, and a cell is flaky when its current environment flipped among its last FLAKY_WINDOW verdicts.
Cells known from the recipes with no verdict are "untested".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from builder.store import run_config, verdict_rules
from builder.store.store import MatrixStore
from builder.plan.cells import Cell

VERDICTS = ("pass", "partial", "fail", "untested")
#: What an event that is not a verdict shows in the verdict column.
ATTEMPT = "attempt"
#: A cell is flaky when the verdict of its current environment flipped among this many latest verdicts.
FLAKY_WINDOW = 10


def run_verdict(result: dict) -> str:
    """pass | partial | fail for one result.json, or ATTEMPT when it is no verdict (interrupted, bad input)."""
    if not verdict_rules.counts("run", result["status"], result.get("error_class")):
        return ATTEMPT
    if result["status"] != "pass":
        return "fail"
    if any(p.get("status") == "fail" for p in result.get("probes") or []):
        return "partial"
    return "pass"


@dataclass(frozen=True)
class Event:
    """One entry of a cell's history: a run or a failed build; a verdict, or only an attempt."""

    at: str
    verdict: str  # pass | partial | fail, or ATTEMPT
    kind: str  # "run" | "build"
    ident: str  # run_id or build uid
    failure_class: str | None = None
    note: str = ""
    environment: str = verdict_rules.UNKNOWN_ENVIRONMENT
    attempt_dir: str | None = None
    configuration: str = run_config.VERDICT_LABEL  # "preset · model"
    decides: bool = True  # the verdict configuration (a build always is: a failed build fails every run)

    @property
    def counts(self) -> bool:
        return self.verdict != ATTEMPT

    @property
    def is_verdict(self) -> bool:
        """A verdict of the cell: about the environment, and of the configuration that decides the cell."""
        return self.counts and self.decides

    @property
    def is_measurement(self) -> bool:
        """About the environment, but of another configuration: shown with its own status, never the cell's."""
        return self.counts and not self.decides


@dataclass
class CellSummary:
    """Everything the matrix knows about one cell, newest facts first where it matters."""

    cell: Cell
    status: str = "untested"
    failure_class: str | None = None
    note: str = ""
    environment: str | None = None  # that of the latest verdict
    events: list[Event] = field(default_factory=list)  # verdicts and attempts, oldest first
    runs: list[dict] = field(default_factory=list)  # store rows, oldest first
    builds: list[dict] = field(default_factory=list)  # store rows, oldest first
    in_recipes: bool = False

    @property
    def key(self) -> str:
        return self.cell.key

    @property
    def verdicts(self) -> list[Event]:
        """The events that decide the cell: verdict-configuration runs and failed builds, oldest first."""
        return [e for e in self.events if e.is_verdict]

    @property
    def measurements(self) -> list[Event]:
        """Runs of other configurations that reached the environment, oldest first."""
        return [e for e in self.events if e.is_measurement]

    @property
    def configurations(self) -> list[str]:
        """The measurement configurations ("preset · model"), the latest measured last."""
        order = {e.configuration: e.at for e in self.measurements}
        return sorted(order, key=order.get)

    def configuration_events(self, configuration: str) -> list[Event]:
        return [e for e in self.measurements if e.configuration == configuration]

    @property
    def attempts(self) -> list[Event]:
        """Events that are not verdicts (interrupted, input errors), oldest first."""
        return [e for e in self.events if not e.counts]

    @property
    def run_count(self) -> int:
        """Runs that are verdicts (attempts are counted in `attempts`)."""
        return sum(e.kind == "run" for e in self.verdicts)

    @property
    def unproven(self) -> bool:
        """A build or run of this cell had a torch built from a source no peer has shown to compile
        (the manifest's torch.git.proof is "unproven", its evidence step "source build, not yet proven")."""
        proofs = [b["torch_proof"] if "torch_proof" in b else _torch_proof(b.get("manifest")) for b in self.builds]
        for row in self.runs:
            result = row.get("result") if isinstance(row.get("result"), dict) else row
            image = result.get("image") if isinstance(result, dict) else None
            proofs.append(_torch_proof(image.get("manifest") if isinstance(image, dict) else None))
        return "unproven" in proofs

    @property
    def environments(self) -> list[str]:
        """The environments with verdicts, the latest one last."""
        order = {e.environment: e.at for e in self.verdicts}
        return sorted(order, key=order.get)

    def environment_verdicts(self, environment: str) -> list[Event]:
        return [e for e in self.verdicts if e.environment == environment]

    @property
    def last_pass_at(self) -> str | None:
        passes = [e.at for e in self.verdicts if e.verdict == "pass"]
        return passes[-1] if passes else None

    @property
    def flips(self) -> list[tuple[Event, Event]]:
        """Consecutive verdicts of one environment that differ (e.g. pass -> fail), oldest first."""
        pairs = [
            (a, b)
            for env in self.environments
            for a, b in _consecutive_pairs(self.environment_verdicts(env))
            if a.verdict != b.verdict
        ]
        return sorted(pairs, key=lambda pair: pair[1].at)

    @property
    def flaky(self) -> bool:
        """The current environment's verdict flipped among its latest FLAKY_WINDOW verdicts."""
        return self.environment is not None and _flaky(self.environment_verdicts(self.environment))

    @property
    def last_event_at(self) -> str | None:
        return self.events[-1].at if self.events else None

    @property
    def latest_run(self) -> dict | None:
        """The newest verdict run (else the newest measurement, else the newest attempt)."""
        counted = [row for row in self.runs if row.get("counts", True)]
        deciding = [row for row in counted if run_config.of_result(row["result"]).decides]
        chosen = deciding or counted or self.runs
        return chosen[-1]["result"] if chosen else None

    @property
    def latest_train_run(self) -> dict | None:
        """The newest completed train run of the verdict configuration (else of any configuration): what the
        numbers, curves and accuracy come from. An interrupted or crashed run never replaces them."""
        return self.latest_completed(run_config.VERDICT_LABEL) or self.latest_completed()

    def latest_completed(self, configuration: str | None = None) -> dict | None:
        """The newest train result of `configuration` (None: any) whose training finished (steps and an eval
        after training), pass or not."""
        for row in reversed(self.runs):
            result = row["result"]
            if completed(result) and configuration in (None, run_config.of_result(result).label):
                return result
        return None


def summarize(
    store: MatrixStore,
    recipe_cells: list[Cell] | tuple[Cell, ...] = (),
    *,
    with_runs: bool = True,
    runs_per_cell: int | None = None,
    cell_key: str | None = None,
    with_manifests: bool | None = None,
) -> list[CellSummary]:
    """A summary per cell: every recorded cell plus every recipe cell, ordered by key.

    Verdicts come from the runs' columns; `with_runs` also loads the runs' full result.json
    (`CellSummary.runs`: what `show`, `export` and the report need, `list` does not), only the
    newest `runs_per_cell` of each cell when given. Rows that do not parse are skipped and listed
    in `store.damaged`. `cell_key`: only that cell (nothing else is read). `with_manifests` (default:
    `with_runs`): the builds' parsed manifests; without them each build has `torch_proof` and `verify_checks`.
    """
    with_manifests = with_runs if with_manifests is None else with_manifests
    summaries: dict[str, CellSummary] = {
        c.key: CellSummary(cell=c, in_recipes=True) for c in recipe_cells if cell_key in (None, c.key)
    }
    for cell in store.cells():
        if cell_key in (None, cell.key):
            summaries.setdefault(cell.key, CellSummary(cell=cell))
    if with_runs:
        for row in store.runs(cell_key, last=runs_per_cell):
            if row["cell_key"] in summaries:
                summaries[row["cell_key"]].runs.append(row)
    events: dict[str, list[Event]] = {}
    for row in store.run_events(cell_key):
        if row["cell_key"] in summaries:
            events.setdefault(row["cell_key"], []).append(_run_event(row))
    for build in store.builds(cell_key, manifests=with_manifests):
        if build["cell_key"] in summaries:
            summaries[build["cell_key"]].builds.append(build)
    for key, summary in summaries.items():
        _fill_verdict(summary, events.get(key, []))
    return [summaries[k] for k in sorted(summaries)]


def completed(result: dict) -> bool:
    """A train run whose training finished: optimizer steps ran and the model was evaluated after them."""
    metrics = result.get("metrics") if isinstance(result.get("metrics"), dict) else {}
    return (
        result.get("command") == "train" and bool(metrics.get("steps")) and isinstance(metrics.get("eval_after"), dict)
    )


def summary_record(s: CellSummary, *, with_runs: bool = True) -> dict:
    """One cell: its coordinates, verdict, history, builds and (`with_runs`) runs."""
    record = {
        **summary_line(s),
        "cell": s.cell.model_dump(),
        "history": [
            {
                "at": e.at,
                "verdict": e.verdict,
                "kind": e.kind,
                "id": e.ident,
                "failure_class": e.failure_class,
                "note": e.note,
                "environment": e.environment,
                "attempt_dir": e.attempt_dir,
            }
            for e in s.events
        ],
        "flips": [{"at": b.at, "from": a.verdict, "to": b.verdict, "environment": b.environment} for a, b in s.flips],
        "builds": s.builds,
    }
    if with_runs:
        record["runs"] = [row["result"] for row in s.runs]
    return record


def _torch_proof(manifest: object) -> str | None:
    """torch.git.proof of a stored manifest (untrusted data: anything not of that shape gives None)."""
    torch = manifest.get("torch") if isinstance(manifest, dict) else None
    git = torch.get("git") if isinstance(torch, dict) else None
    proof = git.get("proof") if isinstance(git, dict) else None
    return proof if isinstance(proof, str) else None


def summary_line(s: CellSummary) -> dict:
    return {
        "key": s.key,
        "status": s.status,
        "failure_class": s.failure_class,
        "note": s.note,
        "unproven": s.unproven,
        "runs": s.run_count,
        "builds": len(s.builds),
        "attempts": len(s.attempts),
        "last_pass_at": s.last_pass_at,
        "last_event_at": s.last_event_at,
        "flaky": s.flaky,
        "environment": s.environment,
        "environments": [environment_line(s, env) for env in s.environments],
        "configuration": run_config.VERDICT_LABEL,
        "measurements": [configuration_line(s, c) for c in s.configurations],
    }


def configuration_line(s: CellSummary, configuration: str) -> dict:
    """One measurement configuration of a cell: its latest status, runs, flips (in one environment) and flaky."""
    events = s.configuration_events(configuration)
    latest = events[-1]
    by_env: dict[str, list[Event]] = {}
    for e in events:
        by_env.setdefault(e.environment, []).append(e)
    flips = sum(a.verdict != b.verdict for env in by_env.values() for a, b in _consecutive_pairs(env))
    return {
        "configuration": configuration,
        "status": latest.verdict,
        "failure_class": latest.failure_class,
        "note": latest.note,
        "runs": len(events),
        "flips": flips,
        "flaky": _flaky(by_env[latest.environment]),
        "last_at": latest.at,
        "environment": latest.environment,
    }


def environment_line(s: CellSummary, environment: str) -> dict:
    """One environment of a cell: its latest verdict, flips and whether it is flaky."""
    verdicts = s.environment_verdicts(environment)
    flips = [(a, b) for a, b in _consecutive_pairs(verdicts) if a.verdict != b.verdict]
    latest = verdicts[-1]
    return {
        "environment": environment,
        "status": latest.verdict,
        "failure_class": latest.failure_class,
        "note": latest.note,
        "verdicts": len(verdicts),
        "flips": len(flips),
        "flaky": _flaky(verdicts),
        "last_pass_at": next((e.at for e in reversed(verdicts) if e.verdict == "pass"), None),
    }


def _run_event(row: dict) -> Event:
    """A run's verdict from its store columns (the same rules as run_verdict)."""
    if row["status"] != "pass":
        verdict, note = "fail", _first_line(row["error"] or row["error_class"] or "")
    elif row["failed_probes"]:
        verdict, note = "partial", f"probe warnings: {row['failed_probes']}"
    else:
        verdict, note = "pass", ""
    config = row.get("configuration") or run_config.UNKNOWN
    return Event(
        at=row["at"],
        verdict=verdict if row["counts"] else ATTEMPT,
        kind="run",
        ident=row["run_id"],
        failure_class=row["error_class"],
        note=note,
        attempt_dir=row["attempt_dir"],
        configuration=config.label if not config.decides else run_config.VERDICT_LABEL,
        decides=config.decides,
        environment=verdict_rules.environment(row["base_image"], row["base_digest"], row["context_hash"]),
    )


def _build_event(build: dict) -> Event:
    """A failed build: a `build:<class>` fail, or an attempt when the rules say it is not a verdict."""
    return Event(
        at=build["created_at"],
        verdict="fail" if build["counts"] else ATTEMPT,
        kind="build",
        ident=build["build_uid"],
        failure_class=f"build:{build['failure_class']}",
        note=_first_line(build.get("error") or ""),
        attempt_dir=build.get("attempt_dir"),
        environment=verdict_rules.environment(
            build.get("base_image"), build.get("base_digest"), build.get("context_hash")
        ),
    )


def _fill_verdict(summary: CellSummary, events: list[Event]) -> None:
    events = list(events) + [_build_event(b) for b in summary.builds if b["status"] == "fail"]
    events.sort(key=lambda e: e.at)
    summary.events = events
    verdicts = summary.verdicts
    if verdicts:
        latest = verdicts[-1]
        summary.status, summary.failure_class, summary.note = latest.verdict, latest.failure_class, latest.note
        summary.environment = latest.environment
    elif summary.measurements:
        summary.note = (
            f"no {run_config.VERDICT_LABEL} run yet: {len(summary.measurements)} measurement(s) of "
            f"{', '.join(summary.configurations)}"
        )
    elif events:
        last = events[-1]
        summary.note = f"no verdict yet: {len(events)} attempt(s), the last {last.failure_class or last.kind}"
    elif summary.builds:
        summary.note = "image built, no run recorded"


def _consecutive_pairs(events: list[Event]) -> list[tuple[Event, Event]]:
    return list(zip(events, events[1:]))


def _flaky(verdicts: list[Event]) -> bool:
    """One environment's verdicts flipped among the latest FLAKY_WINDOW."""
    recent = verdicts[-FLAKY_WINDOW:]
    return any(a.verdict != b.verdict for a, b in _consecutive_pairs(recent))


def _first_line(text: str, limit: int = 200) -> str:
    return text.strip().splitlines()[0][:limit] if text.strip() else ""
