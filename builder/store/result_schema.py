"""The typed schema of a workload `result.json` (docs/result-schema.md): the one door results enter by.

`validate(raw)` returns the result as the matrix stores it, or raises `ResultSchemaError` naming each
violation by its field path and rule. Two layers:

1. Bounds on the whole JSON value, known keys and unknown ones alike (`host`, `config`, probe values,
   the image manifest): objects and arrays nested at most MAX_DEPTH deep, at most MAX_ITEMS entries,
   object keys are strings, numbers are finite and within ±MAX_NUMBER (integers within SQLite's 64 bits),
   strings at most MAX_TEXT characters. Control characters (all but newline and tab) and Unicode bidi
   controls are *removed* from every string: a result's text never steers a terminal or flips a page.
2. Strict types (pydantic v2, strict mode: no "3" for 3, no true for 1) on what envbuild reads:
   identity (`run_id`, `command`, `status`, `error_class`), RFC 3339 UTC timestamps between
   EARLIEST and now + 1 day, versions, hardware, metrics (finite numbers, curves of [step, value]
   pairs), probes and the image block. Unknown keys are kept (bounded by layer 1).

A valid, clean result comes back equal to its input, so importing the same file twice, or a file that an
older envbuild stored, is recognised as the same run. This module imports nothing else from builder.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

SCHEMA_VERSIONS = (1,)
MAX_DEPTH = 16  # nested objects/arrays (the image manifest is 4 deep)
MAX_ITEMS = 100_000  # entries of one object or array (a long run's loss curve: one point per step)
MAX_TEXT = 4096  # characters of one string (error messages, probe messages, host check details)
MAX_NAME = 200  # identifiers, versions, names, image tags
MAX_NUMBER = 1e15  # |value| of any number: far beyond any metric, far from float overflow when plotted
MAX_INT = 2**63 - 1  # SQLite's integers
EARLIEST = datetime(2020, 1, 1, tzinfo=timezone.utc)
FUTURE_SLACK = timedelta(days=1)  # clock skew allowed between the measuring host and this one

#: Removed from every string: C0/C1 controls except newline and tab, DEL, and the bidi controls
#: (LRM/RLM, ALM, LRE..RLO, LRI..PDI) that reorder displayed text.
_STRIPPED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?(Z|\+00:00)")
_IDENT = r"^[A-Za-z0-9][A-Za-z0-9_.:+-]*$"


class ResultSchemaError(ValueError):
    """A result that breaks the schema; `problems` are "field.path: rule" lines."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        super().__init__("; ".join(problems[:5]) + more)


def clean_text(text: str) -> str:
    """`text` without control characters (newline and tab kept) and bidi controls."""
    return _STRIPPED.sub("", text)


def _timestamp(value: str) -> str:
    if not _TIMESTAMP.fullmatch(value):
        raise ValueError("must be an RFC 3339 UTC time like 2026-12-02T13:00:41Z")
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"is not a valid date and time ({exc})") from None
    latest = datetime.now(timezone.utc) + FUTURE_SLACK
    if not EARLIEST <= at <= latest:
        raise ValueError(f"must lie between {EARLIEST:%Y-%m-%d} and now + 1 day ({latest:%Y-%m-%dT%H:%M:%SZ})")
    return value


Name = Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME)]
Ident = Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME, pattern=_IDENT)]
Text = Annotated[StrictStr, Field(max_length=MAX_TEXT)]
Timestamp = Annotated[
    StrictStr,
    Field(max_length=40, description="RFC 3339 UTC (…Z), 2020-01-01 … now + 1 day"),
    AfterValidator(_timestamp),
]
Count = Annotated[StrictInt, Field(ge=0, le=MAX_INT)]
NonNegative = Annotated[StrictInt | StrictFloat, Field(ge=0, le=MAX_NUMBER, allow_inf_nan=False)]
Fraction = Annotated[StrictInt | StrictFloat, Field(ge=0, le=1, allow_inf_nan=False)]
Open = dict[StrictStr, Any]  # an object whose keys and values layer 1 has bounded


class _Block(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class Versions(_Block):
    python: Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=r"^[0-9]")]
    torch: Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=r"^[0-9]")]
    hip: Name | None = None
    cuda: Name | None = None


class Hardware(_Block):
    device_type: Name | None = None
    vendor: Name | None = None
    gpu_name: Name | None = None
    arch: Name | None = None
    gpu_count: Annotated[StrictInt, Field(ge=0, le=65_536)] | None = None
    peak_tflops: NonNegative | None = None


class Evaluation(_Block):
    accuracy: Fraction | None = None
    macro_f1: Fraction | None = None
    loss: NonNegative | None = None


def _curve_point(point: list) -> list:
    step, value = point
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError("a curve point is [step, value] with a step that is an integer >= 0")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError("a curve point is [step, value] with a value that is a number or null")
    return point


#: [step, value]; a diverged value is null (the workload writes it so). Layer 1 bounds the numbers.
CurvePoint = Annotated[list[Any], Field(min_length=2, max_length=2), AfterValidator(_curve_point)]


#: The smallest non-zero rate a result may hold (samples/s, tokens/s, MFU): below it a value is no measurement
#: (a subnormal such as 5e-324 is noise that the report's axes cannot scale to).
MIN_RATE = 1e-9


def _rate(value: float) -> float:
    if 0 < value < MIN_RATE:
        raise ValueError(f"a rate is 0 or at least {MIN_RATE:g} (got {value!r})")
    return value


Rate = Annotated[NonNegative, AfterValidator(_rate)]


class Metrics(_Block):
    eval_before: Evaluation | None = None
    eval_after: Evaluation | None = None
    curves: (
        Annotated[
            dict[Name, list[CurvePoint]],
            Field(description="name -> [step, value] pairs, value null where the loss diverged"),
        ]
        | None
    ) = None
    steps: Count | None = None
    train_seconds: NonNegative | None = None
    samples_per_s: Rate | None = None
    tokens_per_s: Rate | None = None
    mfu: Rate | None = None
    peak_memory_allocated_bytes: Count | None = None
    peak_memory_reserved_bytes: Count | None = None


class Probe(_Block):
    name: Name
    status: Literal["pass", "fail", "skip"]
    message: Text | None = None
    values: Open | None = None


class Host(_Block):
    """The `envbuild doctor --json` record; the report publishes os, kernel, driver, GPU archs and count."""

    os: Text | None = None
    kernel: Text | None = None
    amdgpu_version: Name | None = None
    gpu_archs: Annotated[list[Name], Field(max_length=1024)] | None = None
    gpus: Annotated[list[Any], Field(max_length=1024)] | None = None


class Image(_Block):
    tag: Name | None = None
    digest: Name | None = None
    id: Name | None = None
    manifest: Open | None = None


class Config(_Block):
    preset: Name | None = None
    seed: StrictInt | None = None
    world_size: Count | None = None


class InvocationData(_Block):
    name: Name | None = None
    bundled: StrictBool | None = None
    sha256: Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{64}$")] | None = None


class Invocation(_Block):
    """What made the run: the workload's command line, the `envbuild` command, preset, model, data, overrides."""

    argv: Annotated[list[Text], Field(max_length=1000)] | None = None
    envbuild: Annotated[list[Text], Field(max_length=1000)] | None = None
    preset: Name | None = None
    model: Text | None = None
    revision: Name | None = None
    data: InvocationData | None = None
    overrides: Open | None = None
    probes: StrictBool | None = None


class LoadAverage(_Block):
    start: NonNegative | None = None
    end: NonNegative | None = None


class GpuConditions(_Block):
    """What the vendor's SMI (or /sys) said about the run's GPUs, where readable."""

    tool: Name | None = None  # "nvidia-smi", "rocm-smi", "sysfs", or None when nothing was readable
    other_processes: Annotated[list[Open], Field(max_length=1024)] | None = None
    sm_clock_mhz: NonNegative | None = None
    max_sm_clock_mhz: NonNegative | None = None
    power_limit_w: NonNegative | None = None


class Conditions(_Block):
    """The conditions a measurement ran under (docs/result-schema.md "conditions"); `contended` marks a run that
    something else competed with, `contention` says what."""

    load_average: LoadAverage | None = None
    cpu_count: Count | None = None
    cgroup_cpu_limit: NonNegative | None = None
    gpu: GpuConditions | None = None
    other_envbuild_runs: Count | None = None
    contended: StrictBool
    contention: Annotated[list[Text], Field(max_length=100)] = []


class Result(_Block):
    """A result.json as the matrix reads it (docs/result-schema.md)."""

    schema_version: Literal[SCHEMA_VERSIONS]
    run_id: Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    command: Literal["train", "probe"]
    status: Literal["pass", "fail", "error"]
    error_class: Name | None = None
    error: Text | None = None
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None
    wall_time_s: NonNegative | None = None
    versions: Versions
    hardware: Hardware | None = None
    model: Open | None = None
    dataset: Open | None = None
    config: Config | None = None
    invocation: Invocation | None = None
    metrics: Metrics | None = None
    probes: Annotated[list[Probe], Field(max_length=1000)] | None = None
    artifacts: Open | None = None
    host: Host | None = None
    image: Image | None = None
    conditions: Conditions | None = None

    @model_validator(mode="after")
    def _failure_has_a_class(self) -> "Result":
        if self.status != "pass" and not self.error_class:
            raise ValueError("a result that did not pass needs an error_class")
        return self


class Build(BaseModel):
    """A build row of a matrix file being merged (the columns `MatrixStore.record_build` takes)."""

    model_config = ConfigDict(strict=True, extra="ignore")

    build_uid: Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    status: Literal["pass", "fail"]
    failure_class: Ident | None = None
    error: Text | None = None
    recipe_hash: Name | None = None
    context_hash: Name | None = None
    image_tag: Name | None = None
    image_digest: Name | None = None
    base_image: Name | None = None
    base_digest: Name | None = None
    duration_s: NonNegative | None = None
    log_path: Text | None = None  # kept as a note: never opened (the log is the attempt folder's build.log)
    attempt_dir: Text | None = None
    manifest: Open | None = None
    created_at: Timestamp

    @model_validator(mode="after")
    def _failure_has_a_class(self) -> "Build":
        if self.status == "fail" and not self.failure_class:
            raise ValueError("a failed build needs a failure_class")
        return self


def validate(raw: Any) -> dict:
    """`raw` (parsed JSON) checked against the schema; returns it with its strings cleaned.

    Raises ResultSchemaError listing each violation as "field.path: rule".
    """
    return validated(raw, Result)


def validate_build(raw: Any) -> dict:
    """A merged build row checked like a result (same bounds and cleaning); ResultSchemaError otherwise."""
    return validated(raw, Build)


def validated(raw: Any, model: type[BaseModel]) -> dict:
    """`raw` checked by layer 1 (bounds, cleaning) and then by `model` (strict types); ResultSchemaError otherwise.
    The other documents that enter the matrix (build_record_schema) come through here too."""
    problems: list[str] = []
    cleaned = _bounded(raw, (), problems)
    if problems:
        raise ResultSchemaError(problems)
    if not isinstance(cleaned, dict):
        raise ResultSchemaError(["(top level): must be a JSON object"])
    try:
        model.model_validate(cleaned)
    except ValidationError as exc:
        raise ResultSchemaError([_problem(e) for e in exc.errors(include_url=False)]) from None
    return cleaned


def _problem(error: dict) -> str:
    path = ".".join(str(p) for p in error["loc"] if not str(p).startswith(("function-", "lax-or-strict")))
    path = re.sub(r"\.(int|float|str|bool|list\[[^\]]*\]|dict\[[^\]]*\]|tuple\[[^\]]*\])(?=\.|$)", "", path)
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] in ("literal_error", "missing", "extra_forbidden") or "input" not in error:
        return f"{path or '(top level)'}: {message}"
    shown = repr(error["input"])
    return f"{path or '(top level)'}: {message} (got {shown[:60]}{'…' if len(shown) > 60 else ''})"


def _bounded(value: Any, path: tuple, problems: list[str]) -> Any:
    """Layer 1: the value with strings cleaned; violations appended to `problems` (first 20 kept)."""
    kind = type(value)
    if kind is str:
        if len(value) > MAX_TEXT:
            problems.append(f"{_where(path)}: string longer than {MAX_TEXT} characters ({len(value)})")
            return value
        return _STRIPPED.sub("", value) if _STRIPPED.search(value) else value
    if kind is float:
        if not (-MAX_NUMBER <= value <= MAX_NUMBER):  # NaN fails every comparison
            problems.append(f"{_where(path)}: number must be finite and within ±{MAX_NUMBER:g} (got {value!r})")
        return value
    if value is None or kind is bool:
        return value
    if kind is int:
        if not -MAX_INT <= value <= MAX_INT:
            problems.append(f"{_where(path)}: integer outside ±2^63")
        return value
    if kind is dict or kind is list:
        if len(problems) >= 20:
            return value
        if len(path) >= MAX_DEPTH:
            problems.append(f"{_where(path)}: nested deeper than {MAX_DEPTH} levels")
            return value
        if len(value) > MAX_ITEMS:
            problems.append(f"{_where(path)}: more than {MAX_ITEMS} entries")
            return value
        if kind is list:
            return [_bounded(v, (*path, i), problems) for i, v in enumerate(value)]
        out = {}
        for key, item in value.items():
            if type(key) is not str or len(key) > MAX_NAME:
                problems.append(f"{_where(path)}: object keys must be strings of at most {MAX_NAME} characters")
                continue
            out[clean_text(key)] = _bounded(item, (*path, key), problems)
        return out
    problems.append(f"{_where(path)}: not a JSON value ({kind.__name__})")
    return value


def _where(path: tuple) -> str:
    return ".".join(map(str, path)) or "(top level)"


def rules_markdown(model: type[BaseModel] = Result) -> str:
    """The typed fields of `model` as a Markdown table (docs/result-schema.md embeds Result's, docs/build-record.md
    the build record's; tests keep them equal)."""
    schema = model.model_json_schema()
    rows = ["| field | type | rule |", "|---|---|---|"]

    def walk(prefix: str, node: dict) -> None:
        for name, prop in node.get("properties", {}).items():
            path = f"{prefix}{name}"
            options = prop.get("anyOf", [prop])
            nullable = any(o.get("type") == "null" for o in options)
            options = [o for o in options if o.get("type") != "null"]
            refs = [o["$ref"].rsplit("/", 1)[1] for o in options if "$ref" in o]
            types = refs or [_type_name(o) for o in options]
            required = name in node.get("required", ())
            rule = "; ".join(
                filter(
                    None, ["required" if required else "", *(_rule(o) for o in options), prop.get("description", "")]
                )
            )
            rows.append(f"| `{path}` | {' or '.join(types)}{' or null' if nullable else ''} | {rule or '-'} |")
            for ref in refs:
                walk(f"{path}.", schema["$defs"][ref])
            for o in options:  # a list of objects (probes)
                if "$ref" in o.get("items", {}):
                    walk(f"{path}[].", schema["$defs"][o["items"]["$ref"].rsplit("/", 1)[1]])

    walk("", schema)
    return "\n".join(rows) + "\n"


def _type_name(option: dict) -> str:
    if "anyOf" in option:
        return "number"
    if option.get("type") == "array":
        item = option.get("items", {})
        return f"list of {_type_name(item)}" if item else "list"
    if option.get("type") == "object":
        values = option.get("additionalProperties")
        return f"object of {_type_name(values)}" if isinstance(values, dict) and values else "object"
    if "const" in option or "enum" in option:
        return "string" if isinstance((option.get("enum") or [option.get("const")])[0], str) else "integer"
    return option.get("type", "any")


def _rule(option: dict) -> str:
    parts = []
    if "enum" in option or "const" in option:
        parts.append("one of " + ", ".join(f"`{v}`" for v in option.get("enum") or [option["const"]]))
    if "pattern" in option:
        parts.append(f"matches `{option['pattern']}`")
    if "maxLength" in option:
        parts.append(f"≤ {option['maxLength']} characters")
    low, high = option.get("minimum", option.get("ge")), option.get("maximum", option.get("le"))
    if low is not None or high is not None:
        parts.append(
            f"{low if low is not None else '-∞'} … {high if high is not None else '∞'}".replace(
                "1000000000000000.0", "1e15"
            ).replace("9223372036854775807", "2^63-1")
        )
    if option.get("type") == "array" and option.get("maxItems"):
        parts.append(f"≤ {option['maxItems']} items")
    if option.get("description"):
        parts.append(option["description"])
    return "; ".join(parts)


if __name__ == "__main__":
    print(rules_markdown(), end="")
