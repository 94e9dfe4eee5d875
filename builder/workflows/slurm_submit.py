"""Submitting cells to Slurm: the job array planned from the SIFs, configurations and site settings (`prepare`),
its script and submission record written into an attempt directory beside the matrix file and handed to sbatch
(`submit`), a collect's lost tasks sent again (`resubmit`), and the record found back by job id
(`find_submission`). Bad input is a SlurmError whose message the CLI prints as it is (exit code 2)."""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime, timezone
from pathlib import Path

from pydantic import ValidationError

from builder.engine.slurm import (
    SCRIPT_NAME,
    SUBMISSION_NAME,
    SlurmError,
    Submission,
    load_site,
    parse_configs,
    plan,
    render_script,
    sbatch,
)
from builder.paths import write_text_atomic
from builder.store.attempts import ATTEMPTS_DIR, new_attempt
from builder.store.store import StoreError


def prepare(sifs: list[Path], configs: tuple[str, ...], options: dict, site_path: Path) -> tuple[Submission, str]:
    """The submission of a task per SIF x configuration under the site settings (`options` over the file at
    `site_path`), and its sbatch script; nothing is written."""
    site = load_site(options, site_path)
    sub = plan(
        uuid.uuid4().hex[:12],
        list(sifs),
        parse_configs(configs),
        site,
        datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    return sub, render_script(sub)


def submit(sub: Submission, script: str, db: Path) -> tuple[str, Path]:
    """Write `script` into a new attempt directory beside the matrix file `db`, submit it, and record the job in
    the attempt's submission.json (also when sbatch refuses it: the attempt says what was tried); (job id,
    attempt directory)."""
    if not sub.results_dir.parent.is_dir():  # the tasks make their own directories in it, as the job's user
        raise SlurmError(
            f"results directory {sub.results_dir.parent} does not exist: create it on the shared "
            "file system the compute nodes write to"
        )
    try:
        attempt = new_attempt(db, "slurm", sub.id)
    except (OSError, StoreError) as exc:
        raise SlurmError(str(exc)) from exc
    (attempt / SCRIPT_NAME).write_text(script, encoding="utf-8")
    os.chmod(attempt / SCRIPT_NAME, 0o644)
    try:
        job_id = sbatch(attempt / SCRIPT_NAME, None)
    except SlurmError as exc:
        write_submission(attempt, sub)
        raise SlurmError(f"{exc} (script: {attempt / SCRIPT_NAME})") from exc
    sub.jobs.append({"job_id": job_id, "tasks": [t.index for t in sub.tasks]})
    write_submission(attempt, sub)
    return job_id, attempt


def resubmit(attempt: Path, sub: Submission, tasks: list[int]) -> str:
    """Submit the attempt's script again for `tasks` only, and add the new job to its submission.json."""
    job_id = sbatch(attempt / SCRIPT_NAME, ",".join(map(str, tasks)))
    sub.jobs.append({"job_id": job_id, "tasks": tasks})
    write_submission(attempt, sub)
    return job_id


def write_submission(attempt: Path, sub: Submission) -> None:
    write_text_atomic(attempt / SUBMISSION_NAME, sub.model_dump_json(indent=2) + "\n")


def find_submission(db: Path, job_id: str) -> tuple[Path, Submission]:
    """The attempt directory and submission that submitted `job_id` (beside the matrix file `db`)."""
    if not job_id.isdigit():
        raise SlurmError(f"{job_id!r} is not a Slurm job id (digits only)")
    for path in sorted((db.resolve().parent / ATTEMPTS_DIR).glob(f"*-slurm-*/{SUBMISSION_NAME}"), reverse=True):
        try:
            sub = Submission.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValidationError, json.JSONDecodeError) as exc:
            raise SlurmError(f"{path} is not a valid submission record ({str(exc).splitlines()[0]})") from exc
        if any(j.get("job_id") == job_id for j in sub.jobs):
            return path.parent, sub
    raise SlurmError(f"no submission of job {job_id} beside {db} (submit with `envbuild slurm submit --db {db}`)")
