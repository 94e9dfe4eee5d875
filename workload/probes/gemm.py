"""fp16/bf16 GEMM accuracy on the LoRA shapes against an fp64 reference (half-precision GEMM
errors show up as wrong LoRA updates, not crashes).

The LoRA update is y = (x @ A) @ B with x[tokens, hidden], A[hidden, r], B[r, hidden].
Inputs are drawn once, rounded to the half dtype, and the fp64 reference is computed from
those same rounded values, so the error measured is the device GEMM's alone:
the rounding of the intermediate x@A and of y to the half dtype, plus accumulation.

- relative error  = ||y - ref||_F / ||ref||_F
- scale bias      = <y, ref> / <ref, ref> - 1, the least-squares factor by which y is too large
                    or too small. Round-to-nearest makes it vanish (about u/sqrt(numel)); a
                    truncating conversion shrinks every value, by about 0.7u per rounding.

With unit roundoff u (2^-11 fp16, 2^-8 bf16) and two roundings of O(1) Gaussian data the
expected relative error is about sqrt(2/3)·u = 0.8u. The limits are 8u for the relative error
(10x headroom for summation order and split-K partial sums; an fp16 accumulator over
k = 2048..3072 terms gives about u·sqrt(k/6) = 18u..23u, a wrong kernel O(1)) and u/2 for the
scale bias (a one-stage truncation is 0.7u).
"""

from __future__ import annotations

from typing import Callable

import torch

from ._common import FAIL, PASS, SKIP, ProbeContext, dtype_name, result, unit_roundoff, worst

GPU_SHAPES = [(4096, 2048, 64), (4096, 3072, 64)]  # (tokens, hidden, r): Gemma 2B / 7B widths
CPU_SHAPES = [(128, 256, 16)]
REL_ERROR_LIMIT_U = 8.0
SCALE_BIAS_LIMIT_U = 0.5


def lora_inputs(tokens: int, hidden: int, r: int, dtype: torch.dtype, seed: int = 0):
    """x, A, B scaled so every intermediate is O(1) (no fp16 overflow), already rounded to dtype."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen, dtype=torch.float64)
    a = torch.randn(hidden, r, generator=gen, dtype=torch.float64) / hidden**0.5
    b = torch.randn(r, hidden, generator=gen, dtype=torch.float64) / r**0.5
    return x.to(dtype), a.to(dtype), b.to(dtype)


def device_lora_matmul(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The GEMM under test: two half-precision matmuls on the tensors' device."""
    return (x @ a) @ b


def compare_to_reference(out: torch.Tensor, ref: torch.Tensor) -> dict:
    """Relative error, scale bias and max abs error of `out` against the fp64 `ref`."""
    out = out.to("cpu", torch.float64)
    diff = out - ref
    ref_sq = float((ref * ref).sum())
    return {
        "rel_error": float(diff.norm()) / ref_sq**0.5,
        "scale_bias": float((out * ref).sum()) / ref_sq - 1.0,
        "max_abs_error": float(diff.abs().max()),
        "nonfinite": int((~torch.isfinite(out)).sum()),
    }


def judge(metrics: dict, dtype: torch.dtype) -> list[str]:
    """The limits this GEMM broke, empty when it is within the format's precision."""
    u = unit_roundoff(dtype)
    problems = []
    if metrics["nonfinite"]:
        problems.append(f"{metrics['nonfinite']} non-finite values")
    if not metrics["rel_error"] < REL_ERROR_LIMIT_U * u:
        problems.append(
            f"relative error {metrics['rel_error']:.3g} >= {REL_ERROR_LIMIT_U:g}u = {REL_ERROR_LIMIT_U * u:.3g}"
        )
    if not abs(metrics["scale_bias"]) < SCALE_BIAS_LIMIT_U * u:
        problems.append(
            f"scale bias {metrics['scale_bias']:.3g} beyond ±{SCALE_BIAS_LIMIT_U:g}u = {SCALE_BIAS_LIMIT_U * u:.3g}"
        )
    return problems


def gemm_accuracy(ctx: ProbeContext, matmul: Callable = device_lora_matmul) -> dict:
    shapes = GPU_SHAPES if ctx.on_gpu else CPU_SHAPES
    values: dict = {"shapes": [list(s) for s in shapes]}
    statuses, problems = [], []
    for dtype in ctx.half_dtypes():
        name = dtype_name(dtype)
        for tokens, hidden, r in shapes:
            key = f"{name}_h{hidden}_r{r}"
            x, a, b = lora_inputs(tokens, hidden, r, dtype)
            try:
                out = matmul(x.to(ctx.device), a.to(ctx.device), b.to(ctx.device))
            except RuntimeError as exc:  # e.g. a CPU build without this half matmul
                values[f"{key}_error"] = str(exc).splitlines()[0]
                statuses.append(SKIP if not ctx.on_gpu else FAIL)
                problems.append(f"{key}: {values[f'{key}_error']}")
                continue
            ref = (x.double() @ a.double()) @ b.double()
            metrics = compare_to_reference(out, ref)
            values.update({f"{key}_{k}": v for k, v in metrics.items()})
            broken = judge(metrics, dtype)
            statuses.append(FAIL if broken else PASS)
            problems += [f"{key}: {p}" for p in broken]
    values["rel_error_limit_u"] = REL_ERROR_LIMIT_U
    values["scale_bias_limit_u"] = SCALE_BIAS_LIMIT_U
    return result("gemm_accuracy", worst(statuses), values, "; ".join(problems))
