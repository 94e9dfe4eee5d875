"""Signed build provenance of an image: an in-toto Statement v1 with the SLSA provenance v1 predicate, signed the
way results are (a DSSE envelope, `ssh-keygen -Y sign -n envbuild`, builder.attest.signing).

The statement's subject is the image (`image`, the sha256 of its id). Its predicate (https://slsa.dev/provenance/v1):
- buildDefinition: buildType BUILD_TYPE; externalParameters, what the user asked for (the request the context was
  rendered from, the cell, the context hash, the image tag, the wheelhouse); internalParameters, how it was built
  (build arguments, network, --no-cache); resolvedDependencies, every input by digest: the base image (digest, or
  the tag alone where nothing pins it), torch (the wheel's sha256, the index requirement, or the source commit),
  the patch series, the recipes' lock, and every file of the build context by sha256 as it was read after the build;
- runDetails: the builder (the BuildKit client envbuild drove, envbuild's and the engine's versions), the build's id
  and its start and end, and the SBOM (builder.sbom) as a byproduct by sha256.

`provenance.json` holds the statement exactly as it is signed (sorted keys, no spaces: `payload`); the envelope
`provenance.intoto.jsonl` beside it carries those bytes. A build record links provenance.json by sha256, so the
record says which statement, whoever signs it and whenever. The key must have been valid when the build finished
(runDetails.metadata.finishedOn), the time the statement speaks of.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from builder import build_inputs, strict_json
from builder.attest import signing
from builder.paths import PROVENANCE_ENVELOPE, PROVENANCE_FILE, SBOM_FILE as SBOM_NAME
from builder.sbom import MEDIA_TYPE as SBOM_MEDIA_TYPE

SLSA_PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:envbuild:build-type:image:v1"
PROVENANCE_NAME, ENVELOPE_NAME = PROVENANCE_FILE, PROVENANCE_ENVELOPE
MEDIA_TYPE = signing.PAYLOAD_TYPE  # application/vnd.in-toto+json
MAX_STATEMENT_BYTES = 16 << 20
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class BuildFacts:
    """What the build workflow knows about one finished build, beyond its manifest."""

    build_id: str
    image_tag: str
    image_id: str  # "sha256:<hex>", the image's id
    started_at: str
    finished_at: str
    builder_tool: str  # the BuildKit client line ("DOCKER_BUILDKIT=1 docker build (/usr/bin/docker)")
    builder_kind: str  # "docker-build" | "buildx"
    engine_version: str | None
    envbuild_version: str
    internal: dict  # build arguments, network, no_cache, cache sources


@dataclass(frozen=True)
class VerifiedProvenance:
    principal: str
    fingerprint: str
    statement: dict


def descriptor(item: build_inputs.Input) -> dict:
    """An in-toto ResourceDescriptor for one input (annotations say its role and any note)."""
    out: dict = {"name": item.name}
    if item.uri:
        out["uri"] = item.uri
    if item.digest:
        out["digest"] = dict(item.digest)
    out["annotations"] = {"role": item.role, **({"note": item.note} if item.note else {})}
    return out


def context_file_hashes(context_dir: Path) -> dict[str, str]:
    """{relative path: sha256} of every regular file under the build context, as BuildKit was given it."""
    out = {}
    root = Path(context_dir)
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink():
                out[path.relative_to(root).as_posix()] = _file_sha256(path)
    return out


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def make_statement(
    facts: BuildFacts,
    manifest: dict | None,
    request: dict | None,
    base_digest: str | None,
    context_files: dict[str, str],
    sbom_sha256: str | None,
) -> dict:
    """The in-toto Statement v1 (SLSA provenance v1) of one finished build."""
    image_hex = build_inputs.sha256_of(facts.image_id)
    if image_hex is None:
        raise signing.AttestationInputError(f"the image id {facts.image_id!r} is not a sha256 digest")
    manifest = manifest if isinstance(manifest, dict) else {}
    pinned = [descriptor(i) for i in build_inputs.pinned(manifest, base_digest)]
    files = [
        descriptor(build_inputs.Input("context-file", f"context/{path}", None, {"sha256": digest}))
        for path, digest in sorted(context_files.items())
    ]
    byproducts = []
    if sbom_sha256:
        byproducts.append({"name": SBOM_NAME, "digest": {"sha256": sbom_sha256}, "mediaType": SBOM_MEDIA_TYPE})
    return {
        "_type": signing.STATEMENT_TYPE,
        "subject": [{"name": signing.IMAGE_SUBJECT, "digest": {"sha256": image_hex}}],
        "predicateType": SLSA_PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "request": request,
                    "cell": manifest.get("cell_key"),
                    "context_hash": manifest.get("context_hash"),
                    "image_tag": facts.image_tag,
                    "wheelhouse": {
                        p: d
                        for p, d in sorted(context_files.items())
                        if p.startswith("wheelhouse/") and p.endswith(".whl")
                    },
                },
                "internalParameters": facts.internal,
                "resolvedDependencies": pinned + files,
            },
            "runDetails": {
                "builder": {
                    "id": f"urn:envbuild:builder:{facts.builder_kind}",
                    "version": {
                        "envbuild": facts.envbuild_version,
                        "buildkit_client": facts.builder_tool,
                        **({"engine": facts.engine_version} if facts.engine_version else {}),
                    },
                },
                "metadata": {
                    "invocationId": facts.build_id,
                    "startedOn": facts.started_at,
                    "finishedOn": facts.finished_at,
                },
                "byproducts": byproducts,
            },
        },
    }


def payload(statement: dict) -> bytes:
    """The statement's bytes as they are signed and as provenance.json holds them."""
    return json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()


def sign(statement_bytes: bytes, key: Path) -> dict:
    """The DSSE envelope of the statement in `statement_bytes` (provenance.json's bytes, which must be `payload`'s
    form of the statement, so that the envelope carries exactly them). AttestationInputError otherwise."""
    statement = _parse_statement(statement_bytes, PROVENANCE_NAME)
    if payload(statement) != statement_bytes:
        raise signing.AttestationInputError(
            f"{PROVENANCE_NAME} is not in the form envbuild signs (sorted keys, no spaces): it was edited"
        )
    return signing.sign_statement(statement, key)


def sign_file(statement_path: Path, key: Path) -> Path:
    """Sign provenance.json at `statement_path`; the envelope goes beside it (provenance.intoto.jsonl)."""
    raw = read_statement(statement_path)
    target = Path(statement_path).with_name(ENVELOPE_NAME)
    signing.write_attestation(sign(raw, key), target)
    return target


def read_statement(path: Path) -> bytes:
    try:
        return strict_json.read_regular(Path(path), MAX_STATEMENT_BYTES)
    except (OSError, ValueError) as exc:
        raise signing.AttestationInputError(f"{path}: {exc}") from exc


def _parse_statement(raw: bytes, where: str) -> dict:
    try:
        statement = strict_json.loads(raw)
    except ValueError as exc:
        raise signing.AttestationInputError(f"{where}: {exc}") from None
    if not isinstance(statement, dict):
        raise signing.AttestationInputError(f"{where}: not an in-toto statement (a JSON object)")
    return statement


def finished_on(statement: dict) -> datetime:
    """When the build finished (runDetails.metadata.finishedOn): the time the key's window is checked at."""
    stamp = (((statement.get("predicate") or {}).get("runDetails") or {}).get("metadata") or {}).get("finishedOn")
    if not isinstance(stamp, str) or not _TIME.fullmatch(stamp):
        raise signing.InvalidStatement("the provenance has no runDetails.metadata.finishedOn (YYYY-MM-DDTHH:MM:SSZ)")
    try:
        when = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        raise signing.InvalidStatement(f"finishedOn {stamp!r} is not a valid time") from None
    if when.timestamp() > datetime.now(timezone.utc).timestamp() + signing.CLOCK_SKEW_S:
        raise signing.InvalidStatement(f"finishedOn {stamp} lies in the future")
    return when


def check_predicate(statement: dict) -> None:
    """The SLSA predicate has the shape this module writes: a build type, parameters, descriptors with digests."""
    predicate = statement["predicate"]
    definition = predicate.get("buildDefinition")
    run = predicate.get("runDetails")
    if not isinstance(definition, dict) or definition.get("buildType") != BUILD_TYPE:
        raise signing.InvalidStatement(f"buildDefinition.buildType is not {BUILD_TYPE!r}")
    if not isinstance(definition.get("externalParameters"), dict):
        raise signing.InvalidStatement("buildDefinition.externalParameters is not an object")
    dependencies = definition.get("resolvedDependencies")
    if not isinstance(dependencies, list) or not all(
        isinstance(d, dict)
        and isinstance(d.get("name"), str)
        and isinstance(d.get("digest", {}), dict)
        and all(isinstance(v, str) for v in d.get("digest", {}).values())
        for d in dependencies
    ):
        raise signing.InvalidStatement("resolvedDependencies are not resource descriptors (name, digest)")
    if not isinstance(run, dict) or not isinstance((run.get("builder") or {}).get("id"), str):
        raise signing.InvalidStatement("runDetails.builder.id is missing")
    if not isinstance(run.get("byproducts", []), list):
        raise signing.InvalidStatement("runDetails.byproducts is not a list")
    finished_on(statement)


def byproduct_sha256(statement: dict, name: str = SBOM_NAME) -> str | None:
    for item in statement["predicate"]["runDetails"].get("byproducts", []):
        if isinstance(item, dict) and item.get("name") == name:
            sha = (item.get("digest") or {}).get("sha256")
            return sha if isinstance(sha, str) and _HEX64.fullmatch(sha) else None
    return None


def context_digests(statement: dict) -> dict[str, str]:
    """{path in the context: sha256} of the statement's context-file dependencies."""
    out = {}
    for item in statement["predicate"]["buildDefinition"]["resolvedDependencies"]:
        if (item.get("annotations") or {}).get("role") == "context-file" and item["name"].startswith("context/"):
            out[item["name"].removeprefix("context/")] = (item.get("digest") or {}).get("sha256", "")
    return out


def verify(envelope_path: Path, allowed_signers: Path, revoked: Path | None) -> tuple[VerifiedProvenance, bytes]:
    """Verify the envelope's signature and signer, the statement's type, subject and predicate; returns what was
    verified and the signed statement's bytes (to compare with provenance.json and a record's link).
    VerificationFailure / AttestationInputError."""
    envelope = signing.load_envelope(Path(envelope_path))
    principal, fingerprint, statement = signing.verify_envelope(
        envelope, Path(allowed_signers), revoked, SLSA_PREDICATE_TYPE, signing.IMAGE_SUBJECT, when=finished_on
    )
    check_predicate(statement)
    return VerifiedProvenance(principal, fingerprint, statement), bytes(envelope.payload)
