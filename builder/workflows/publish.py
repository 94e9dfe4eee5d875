"""`envbuild matrix publish FILE --name NAME -o results/`: a measured run or a build record, ready to commit.

The repository's `results/` folder holds real runs' result.json files that CI imports into a fresh matrix to render
docs/compatibility.md. A local result.json may hold more about its host than a published one should
(docs/result-schema.md): the host name and the kernel command line are dropped here, the rest is kept as measured.
Files land in `results/<cell key>/<name>/` (the key and name checked as path parts), with the run's container.log
next to it when there is one (scrubbed of the host's known secret values), and with a key its attestation
(result.json.intoto.jsonl, builder.attest.signing). A build record goes there as it is, under the cell its context
recomputes to (builder.workflows.publish_build)."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from builder import strict_json
from builder.as_found import will_create
from builder.known_secrets import MAX_KEPT_LOG, copy_scrubbed
from builder.paths import BUILD_RECORD, CONTAINER_LOG, output_problem
from builder.plan.cells import Cell
from builder.slug import plain
from builder.store import build_record_schema
from builder.store.store import StoreError, validate_result
from builder.workflows import publish_build
from builder.workflows.attestations import SignRequest, sign_result
from builder.workflows.errors import BadRequest, BadValue
from workload.result import RESULT_FILE

PRIVATE_HOST_KEYS = ("hostname", "kernel_cmdline")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class PublishRequest:
    file: Path  # a run's result.json or a build's build-record.json
    name: str  # the run's folder name under results/<cell>/
    out: Path  # the results folder
    key: Path | None  # sign with this SSH key
    commands: tuple[str, ...]  # the exact commands that made it (required with a key)
    sif: Path | None  # the SIF the run used: its sha256 becomes a signed subject
    site: Path | None  # a site's recipe folder over the packaged one (a build record's cell is recomputed with it)


@dataclass(frozen=True)
class Published:
    written: Path  # the published result.json or build-record.json
    attestation: Path | None


def publishable(result: dict) -> dict:
    """`result` without the host details a public file must not carry."""
    host = result.get("host")
    if not isinstance(host, dict):
        return result
    return {**result, "host": {k: v for k, v in host.items() if k not in PRIVATE_HOST_KEYS}}


def publish(request: PublishRequest, notify: Callable[[str], None]) -> Published:
    """Copy the file into OUT/<cell>/<NAME>/ (what the command makes is noted with will_create). A bad name, an
    invalid file, an existing entry, an unwritable OUT or a key that cannot sign are BadValue / BadRequest (exit 2),
    and nothing is left behind."""
    if not _NAME.fullmatch(request.name):
        raise BadValue(f"{request.name!r}: use letters, digits, '.', '_' and '-' (up to 64)", "name")
    if _is_build_record(request.file):
        return _publish_build(request)
    try:
        raw = strict_json.read_regular(request.file, strict_json.MAX_RESULT_BYTES)
        result = validate_result(strict_json.loads(raw))
        cell = Cell.from_result(result)
    except (OSError, ValueError, StoreError, RecursionError) as exc:
        raise BadValue(f"{request.file}: {exc}", "result_json") from exc
    if request.key is not None and not request.commands:
        raise BadRequest("give the exact commands that made this result with --command (repeat it)")
    target = _new_folder(request.out / cell.key / request.name)
    target.mkdir(parents=True)
    try:
        (target / RESULT_FILE).write_text(json.dumps(publishable(result), indent=2, sort_keys=True) + "\n")
        log = request.file.with_name(CONTAINER_LOG)
        if log.is_symlink():  # a link would publish whatever it points at
            notify(f"warning: {log} is a symbolic link; not published")
        elif log.is_file() and not copy_scrubbed(log, target / CONTAINER_LOG, MAX_KEPT_LOG):
            notify(f"warning: {log} is not a regular file of at most {MAX_KEPT_LOG} bytes; not published")
        attestation = None
        if request.key is not None:
            attestation = sign_result(SignRequest(target / RESULT_FILE, request.key, request.commands, request.sif))
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return Published(target / RESULT_FILE, attestation)


def _new_folder(target: Path) -> Path:
    """`target`, which must not exist and can be made here (noted with will_create; not made yet)."""
    if target.exists():
        raise BadRequest(f"{target} exists already: choose another --name")
    if problem := output_problem(target):
        raise BadValue(problem, "out")
    will_create(target)
    return target


def _is_build_record(path: Path) -> bool:
    """Whether FILE declares itself a build record (its name, or its `format`); read bounded, parsed leniently: the
    door (verify_build.read) checks it whole."""
    if path.name == BUILD_RECORD:
        return True
    try:
        return build_record_schema.is_build_record(
            strict_json.loads(strict_json.read_regular(path, strict_json.MAX_RESULT_BYTES))
        )
    except (OSError, ValueError, RecursionError):
        return False


def _publish_build(request: PublishRequest) -> Published:
    if request.key is not None and not request.commands:
        raise BadRequest("give the exact commands that made this build with --command (repeat it)")
    try:
        prepared = publish_build.prepare(request.file, request.site)
    except publish_build.PublishError as exc:
        raise BadValue(plain(exc), "record") from exc
    target = _new_folder(request.out / prepared.cell.key / request.name)
    try:
        written, attestation = publish_build.write(prepared, target, request.key, request.commands)
    except publish_build.PublishError as exc:
        raise BadRequest(plain(exc)) from exc
    return Published(written, attestation)
