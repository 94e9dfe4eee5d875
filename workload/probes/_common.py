"""Shared pieces of the probes: the result record, the context they run in, precision helpers."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import torch

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclasses.dataclass(frozen=True)
class ProbeContext:
    """What every probe receives: the device under test, the run's dtype, the tokenizer (if any)."""

    device: torch.device
    dtype: torch.dtype | None = None
    tokenizer: Any = None

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    def half_dtypes(self) -> list[torch.dtype]:
        """The half-precision dtypes to test: the run's own if it is one, else both."""
        if self.dtype in (torch.float16, torch.bfloat16):
            return [self.dtype]
        return [torch.float16, torch.bfloat16]


def result(name: str, status: str, values: dict | None = None, message: str = "") -> dict:
    """One probe record as `docs/result-schema.md` describes it."""
    if status not in (PASS, FAIL, SKIP):
        raise ValueError(f"probe status must be pass/fail/skip, got {status!r}")
    return {"name": name, "status": status, "values": dict(values or {}), "message": message}


def run_guarded(name: str, fn: Callable[[ProbeContext], dict], ctx: ProbeContext) -> dict:
    """Run one probe; an exception becomes a "fail" record carrying the message, never a crash."""
    start = time.perf_counter()
    try:
        record = fn(ctx)
    except Exception as exc:  # a probe must never take the caller down
        record = result(name, FAIL, {}, f"probe crashed: {type(exc).__name__}: {exc}")
    record["values"]["duration_s"] = round(time.perf_counter() - start, 4)
    return record


def unit_roundoff(dtype: torch.dtype) -> float:
    """u = eps/2: the largest relative error of one round-to-nearest into `dtype`."""
    return torch.finfo(dtype).eps / 2


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp64"}[dtype]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def is_rocm() -> bool:
    return getattr(torch.version, "hip", None) is not None


def worst(statuses: list[str]) -> str:
    """fail beats pass beats skip: a probe passes if something was tested and nothing failed."""
    if FAIL in statuses:
        return FAIL
    return PASS if PASS in statuses else SKIP
