"""The typed schema of a build record, `build-record.json` (docs/build-record.md): the one door build records enter
by, the way result_schema is for result.json.

`envbuild image` writes one into the build's attempt directory; `matrix publish` copies it into results/ and may
sign it; `matrix verify` and `matrix import` read it back. `validate(raw)` returns the record as the store keeps
it (strings cleaned by result_schema's first layer: bounded nesting, sizes and numbers, no control or bidi
characters) or raises `BuildRecordError` naming each violation by field path and rule. The typed layer is strict
(pydantic v2, strict mode). Unknown top-level keys are kept (bounded), so a later version can add fields; the
`sbom` and `provenance` links are reserved for the image's SBOM and signed build provenance.

What the record says about its cell is a claim: the cell it is filed under is recomputed from its request and
context hash with our own recipes (builder.plan.context_identity), never read from it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, model_validator

from builder.store.result_schema import (
    Count,
    Ident,
    Name,
    NonNegative,
    ResultSchemaError,
    Text,
    Timestamp,
    rules_markdown,
    validated,
)

FORMAT = "envbuild-build-record"
SCHEMA_VERSIONS = (1,)
MAX_TAIL_LINES = 200  # lines of the failing step's output a record keeps
_HEX64 = r"^[0-9a-f]{64}$"
_WHEEL = r"^wheelhouse/[A-Za-z0-9][A-Za-z0-9_.+-]{0,200}\.whl$"

Sha256 = Annotated[StrictStr, Field(pattern=_HEX64)]
Digest = Annotated[StrictStr, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
BuildId = Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
Version = Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=r"^[0-9][0-9A-Za-z.+-]*$")]


class BuildRecordError(ResultSchemaError):
    """A build record that breaks the schema; `problems` are "field.path: rule" lines."""


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class CellClaim(_Strict):
    """The cell the record says it built (checked, never trusted: the store files it under the recomputed one)."""

    flavor: Ident
    accel_version: Version | None = None
    torch: Version
    arch: Ident | None = None
    python: Version


class BuildRequest(_Strict):
    """The request the context was rendered from, as `envbuild image` flags: what a verifier resolves again."""

    flavor: Ident
    accel_version: Version | None = None
    torch: Version
    arch: Ident | None = None
    python: Version
    torch_source: Literal["wheel", "source"]
    base_image: Name
    install_accel: StrictBool = False


class Failure(_Strict):
    """Where a failed build stopped: the step (BuildKit's name for it), its class and message, its last lines."""

    failure_class: Ident
    step: Text
    message: Text = ""
    hint: Text = ""
    log_tail: Annotated[list[Text], Field(max_length=MAX_TAIL_LINES)] = []
    evidence: Annotated[list[Text], Field(max_length=50)] = []


class Memory(_Strict):
    """Memory in use on the building host (MemTotal - MemAvailable, /proc/meminfo) during the build: at its start
    and at its peak, sampled every `interval_s`; not the build's own share alone (docs/build-record.md)."""

    scope: Literal["host"]
    peak_bytes: Count
    start_bytes: Count
    total_bytes: Count
    samples: Count
    interval_s: NonNegative


class CompileJobs(_Strict):
    """How many compile jobs a source build ran (MAX_JOBS) and why: min(CPUs, usable memory / per-job figure)."""

    max_jobs: Annotated[StrictInt, Field(ge=1, le=65_536)]
    per_job_mb: Annotated[StrictInt, Field(ge=1, le=1 << 30)]
    engine_memory_bytes: Count
    engine_cpus: Annotated[StrictInt, Field(ge=1, le=65_536)]
    reason: Text


class Ccache(_Strict):
    """The compiler cache's hits and misses during this build, read from `ccache --show-stats` in its log; not
    measured where no step printed them (a build that compiles nothing with ccache)."""

    measured: StrictBool
    hits: Count | None = None
    misses: Count | None = None
    note: Text = ""

    @model_validator(mode="after")
    def _counts_when_measured(self) -> "Ccache":
        if self.measured != (self.hits is not None and self.misses is not None):
            raise ValueError("a measured ccache block has hits and misses; one not measured has neither")
        return self


class Image(_Strict):
    """The image a passing build tagged: its id (the config digest, as `docker image inspect` names it)."""

    digest: Digest
    tag: Name


class Base(_Strict):
    image: Name | None = None
    digest: Name | None = None


class Builder(_Strict):
    tool: Text
    envbuild_version: Name


class Link(_Strict):
    """A file beside the record that a later version adds (the image's SBOM, its signed build provenance)."""

    name: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")]
    sha256: Sha256
    media_type: Name


class BuildRecord(BaseModel):
    """build-record.json as the matrix reads it (docs/build-record.md)."""

    model_config = ConfigDict(strict=True, extra="allow")

    format: Literal[FORMAT]
    schema_version: Literal[SCHEMA_VERSIONS]
    build_id: BuildId
    cell: CellClaim
    request: BuildRequest
    context_hash: Sha256
    wheelhouse: Annotated[dict[Annotated[StrictStr, Field(pattern=_WHEEL)], Sha256], Field(max_length=1000)] = {}
    recipe_hash: Name | None = None
    image_tag: Name
    status: Literal["pass", "fail"]
    failure: Failure | None = None
    started_at: Timestamp
    finished_at: Timestamp
    wall_time_s: NonNegative
    memory: Memory | None = None
    compile_jobs: CompileJobs | None = None
    ccache: Ccache
    image: Image | None = None
    verify_checks: Count | None = None  # checks the image's own verify step passed at the end of its build
    base: Base
    builder: Builder
    sbom: Link | None = None
    provenance: Link | None = None

    @model_validator(mode="after")
    def _outcome(self) -> "BuildRecord":
        if self.status == "fail" and self.failure is None:
            raise ValueError("a failed build names its failure (failure.failure_class, failure.step)")
        if self.status == "pass" and (self.failure is not None or self.image is None):
            raise ValueError("a passing build names its image (image.digest) and no failure")
        if self.status == "fail" and self.image is not None:
            raise ValueError("a failed build tagged no image: image must be null")
        return self


def validate(raw: Any) -> dict:
    """`raw` (parsed JSON) checked against the schema; returns it with its strings cleaned. BuildRecordError lists
    each violation as "field.path: rule"."""
    try:
        return validated(raw, BuildRecord)
    except ResultSchemaError as exc:
        raise BuildRecordError(exc.problems) from None


def is_build_record(raw: Any) -> bool:
    """Whether a parsed JSON document declares itself a build record (its `format`); validate it all the same."""
    return isinstance(raw, dict) and raw.get("format") == FORMAT


def verify_check_count(manifest: Any) -> int | None:
    """How many checks the image's verify record in its manifest holds: the record's `verify_checks` (None: no
    verify record in this manifest)."""
    verify = manifest.get("verify") if isinstance(manifest, dict) else None
    checks = verify.get("checks") if isinstance(verify, dict) else None
    return len(checks) if isinstance(checks, list) else None


def markdown() -> str:
    """The typed fields as a Markdown table (docs/build-record.md embeds it; a test keeps the two equal)."""
    return rules_markdown(BuildRecord)


if __name__ == "__main__":
    print(markdown(), end="")
