"""What a built image says about itself: its SBOM (builder.sbom, from the packages read inside it) and its build
provenance (builder.attest.build_provenance, an SLSA v1 statement), signed with `--sign KEY`.

`describe` runs after a build that made an image (not a skipped one). It writes the files into the build's attempt
directory, where its build record links them by sha256 (BuildAttempt.links), and beside the context as
`<context>.sbom.cdx.json`, `<context>.provenance.json` and `<context>.provenance.intoto.jsonl`, the way the build
log lands there. The build stands without them: an image whose packages cannot be read, or a key that cannot sign,
leaves a `problem` to report and the rest as it is.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import docker.errors

from builder import __version__, sbom
from builder.attest import build_provenance, signing
from builder.engine.build import BuildOptions, BuildOutcome, base_digest
from builder.engine.docker import EngineUnavailable, detect_build_tool, docker_client
from builder.engine.image_contents import ContentsError, read_contents
from builder.paths import PROVENANCE_ENVELOPE, PROVENANCE_FILE, SBOM_FILE, write_text_atomic
from builder.plan.context_identity import request_of
from builder.workflows.build import BuildContext
from builder.workflows.build_record import BuildAttempt


@dataclass
class Described:
    """The files `describe` wrote (attempt copies first), the SBOM's counts, and what could not be done."""

    written: list[Path] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # components by source: dpkg, python, pinned
    signed_by: str | None = None  # the key's fingerprint when the statement was signed
    problem: str | None = None


def beside_context(context_dir: Path, name: str) -> Path:
    """`<context>.<name>` next to the context dir (never inside: the context is what BuildKit is sent)."""
    directory = Path(context_dir).resolve()
    return directory.parent / f"{directory.name}.{name}"


def sbom_of(tag: str, context: BuildContext, log_path: Path | None) -> tuple[bytes, dict[str, int]]:
    """The SBOM bytes of image `tag` built from `context` and the count of its components by source. ContentsError
    and EngineUnavailable pass through."""
    contents = read_contents(tag)
    base = base_digest((context.manifest or {}).get("base_image"), log_path)
    document = sbom.document(tag, contents, context.manifest, base, __version__)
    return document, _counts(document)


def _counts(document: bytes) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in sbom.read_components(document):
        source = key.split(" ", 1)[0]
        counts[source] = counts.get(source, 0) + 1
    return counts


def _times(attempt: BuildAttempt | None, outcome: BuildOutcome) -> tuple[str, str]:
    if attempt is not None and attempt.measured is not None:
        return attempt.measured.started_at, attempt.measured.finished_at
    end = datetime.now(timezone.utc).replace(microsecond=0)
    start = end - timedelta(seconds=round(outcome.seconds))
    return start.strftime("%Y-%m-%dT%H:%M:%SZ"), end.strftime("%Y-%m-%dT%H:%M:%SZ")


def _engine_version() -> str | None:
    try:
        return str(docker_client().version().get("Version") or "") or None
    except (EngineUnavailable, docker.errors.APIError):
        return None


def _build_id(attempt: BuildAttempt | None, outcome: BuildOutcome) -> str:
    """The attempt's id, or for a build that is not recorded one made from the image it built."""
    if attempt is not None:
        return attempt.uid
    return "unrecorded-" + hashlib.sha256(f"{outcome.image_id}".encode()).hexdigest()[:24]


def statement_of(
    context: BuildContext,
    outcome: BuildOutcome,
    options: BuildOptions,
    attempt: BuildAttempt | None,
    sbom_bytes: bytes | None,
) -> dict:
    """The SLSA provenance statement of the build that made `outcome` (AttestationInputError without an image id)."""
    started, finished = _times(attempt, outcome)
    try:
        tool = detect_build_tool()
        kind, describe_tool = tool.kind, tool.describe
    except EngineUnavailable:
        kind, describe_tool = "unknown", outcome.tool
    facts = build_provenance.BuildFacts(
        build_id=_build_id(attempt, outcome),
        image_tag=outcome.tag,
        image_id=outcome.image_id or "",
        started_at=started,
        finished_at=finished,
        builder_tool=describe_tool,
        builder_kind=kind,
        engine_version=_engine_version(),
        envbuild_version=__version__,
        internal={
            "build_args": dict(sorted(options.build_args.items())),
            "network": options.network,
            "no_cache": options.no_cache,
            "cache_from": list(options.cache_from),
            "ca_secret": options.ca_cert is not None,
            "proxy_args": "passed by name from the environment, values not recorded",
        },
    )
    try:
        request = request_of(context.manifest) if context.manifest else None
    except (KeyError, TypeError):
        request = None
    base = base_digest((context.manifest or {}).get("base_image"), outcome.log_path)
    files = build_provenance.context_file_hashes(context.directory)
    sha = hashlib.sha256(sbom_bytes).hexdigest() if sbom_bytes else None
    return build_provenance.make_statement(facts, context.manifest, request, base, files, sha)


def describe(
    context: BuildContext,
    outcome: BuildOutcome,
    options: BuildOptions,
    attempt: BuildAttempt | None,
    key: Path | None,
) -> Described:
    """Write the SBOM and provenance of a build that made an image (attempt and beside the context), sign the
    provenance with `key` when given, and set the attempt's links. Never raises for what it cannot do: the
    problem is in the outcome."""
    done = Described()
    if outcome.skipped or not outcome.image_id:
        return done
    problems = []
    try:
        sbom_bytes, done.counts = sbom_of(outcome.tag, context, outcome.log_path)
    except (ContentsError, EngineUnavailable, sbom.SbomError) as exc:
        sbom_bytes = None
        problems.append(f"no SBOM: {exc}")
    statement_bytes = build_provenance.payload(statement_of(context, outcome, options, attempt, sbom_bytes))
    envelope = None
    if key is not None:
        try:
            envelope = build_provenance.sign(statement_bytes, key)
            done.signed_by = next(iter(s["keyid"] for s in envelope["signatures"]), None)
        except signing.AttestationInputError as exc:
            problems.append(f"the provenance is not signed: {exc}")
    files = {PROVENANCE_FILE: statement_bytes.decode()}
    if sbom_bytes is not None:
        files[SBOM_FILE] = sbom_bytes.decode()
    if envelope is not None:
        files[PROVENANCE_ENVELOPE] = json.dumps(envelope, sort_keys=True) + "\n"
    folders = [attempt.directory] if attempt is not None else []
    for name, text in sorted(files.items()):
        for target in [*(folder / name for folder in folders), beside_context(context.directory, name)]:
            write_text_atomic(target, text)
            done.written.append(target)
    if attempt is not None:
        attempt.links = {
            "provenance": _link(PROVENANCE_FILE, statement_bytes, build_provenance.MEDIA_TYPE),
            **({"sbom": _link(SBOM_FILE, sbom_bytes, sbom.MEDIA_TYPE)} if sbom_bytes is not None else {}),
        }
    for name in {SBOM_FILE, PROVENANCE_ENVELOPE} - files.keys():  # an earlier build's would not be this image's
        beside_context(context.directory, name).unlink(missing_ok=True)
    done.problem = "; ".join(problems) or None
    return done


def _link(name: str, data: bytes, media_type: str) -> dict:
    return {"name": name, "sha256": hashlib.sha256(data).hexdigest(), "media_type": media_type}


def copy_linked(record: dict, source_dir: Path, target_dir: Path) -> list[Path]:
    """Copy the files a build record links (and the provenance's envelope, when there is one) from `source_dir`
    into `target_dir`; only the link names this module writes are copied, each checked against its sha256.
    AttestationInputError for a linked file that is missing or not the one the record names."""
    copied = []
    for field_name, expected_name in (("sbom", SBOM_FILE), ("provenance", PROVENANCE_FILE)):
        link = record.get(field_name)
        if not link:
            continue
        if link.get("name") != expected_name:
            raise signing.AttestationInputError(f"the record's {field_name} link names {link.get('name')!r}")
        data = _read_linked(source_dir / expected_name, link)
        (target_dir / expected_name).write_bytes(data)
        copied.append(target_dir / expected_name)
    envelope = source_dir / PROVENANCE_ENVELOPE
    if record.get("provenance") and envelope.is_file() and not envelope.is_symlink():
        shutil.copyfile(envelope, target_dir / PROVENANCE_ENVELOPE)
        copied.append(target_dir / PROVENANCE_ENVELOPE)
    return copied


def _read_linked(path: Path, link: dict) -> bytes:
    try:
        data = build_provenance.read_statement(path)
    except signing.AttestationInputError as exc:
        raise signing.AttestationInputError(f"the record links {path.name}, which cannot be read: {exc}") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != link.get("sha256"):
        raise signing.AttestationInputError(
            f"{path} (sha256 {actual[:16]}…) is not the file the record links (sha256 {str(link.get('sha256'))[:16]}…)"
        )
    return data
