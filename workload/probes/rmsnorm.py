"""Gemma RMSNorm in half precision on tiny and large activations.

GemmaRMSNorm computes in fp32 and scales by (1 + weight) (transformers
modeling_gemma.py, GemmaRMSNorm). Activations of 1e-4
square to 1e-8, below fp16's smallest subnormal (6e-8); activations of 1e4..6e4 square to
1e8..3.6e9, far above fp16's maximum (65504). Computed in fp32 both are harmless, so the
output must be finite and within rounding of an fp64 reference computed from the same
half-precision input and weight. The only error left is the rounding of the output to the
half dtype (at most u relative per element), so the limit is
max|y - ref| <= 2u · max|ref|. What a naive all-half computation gives is reported
alongside (naive_*) to show what the fp32 upcast protects against; it does not decide.
"""

from __future__ import annotations

import sys

import torch

from ._common import FAIL, PASS, ProbeContext, dtype_name, result, unit_roundoff, worst

EPS = 1e-6  # Gemma's rms_norm_eps
ERROR_LIMIT_U = 2.0


def _gemma_rmsnorm(hidden: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.nn.Module, str]:
    """transformers' GemmaRMSNorm when the caller has loaded Gemma's modeling code, else the same
    formula written out (importing transformers' Gemma modeling alone costs seconds)."""
    modeling = sys.modules.get("transformers.models.gemma.modeling_gemma")
    if modeling is not None and hasattr(modeling, "GemmaRMSNorm"):
        module, impl = modeling.GemmaRMSNorm(hidden, eps=EPS), "transformers.GemmaRMSNorm"
    else:
        module, impl = ReferenceGemmaRMSNorm(hidden, eps=EPS), "workload.probes.rmsnorm"
    with torch.no_grad():
        module.weight.copy_(torch.randn(hidden, generator=torch.Generator().manual_seed(1)) * 0.1)
    return module.to(device=device, dtype=dtype), impl


class ReferenceGemmaRMSNorm(torch.nn.Module):
    """x / sqrt(mean(x^2) + eps) * (1 + weight), computed in fp32, returned in x's dtype."""

    def __init__(self, hidden: int, eps: float = EPS):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.zeros(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).type_as(x)


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    xd, wd = x.to("cpu", torch.float64), weight.to("cpu", torch.float64)
    return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + wd)


def _naive_half(x: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + weight)


def activations(kind: str, rows: int, hidden: int, dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator().manual_seed(2)
    if kind == "tiny":
        x = 1e-4 * torch.randn(rows, hidden, generator=gen)
    else:
        magnitude = 1e4 + 5e4 * torch.rand(rows, hidden, generator=gen)
        x = magnitude * torch.where(torch.rand(rows, hidden, generator=gen) < 0.5, -1.0, 1.0)
    return x.to(dtype)


def normwise_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = out.to("cpu", torch.float64)
    return float((out - ref).abs().max() / ref.abs().max())


def rmsnorm_stability(ctx: ProbeContext) -> dict:
    rows, hidden = (4096, 3072) if ctx.on_gpu else (64, 256)
    values: dict = {"rows": rows, "hidden": hidden, "eps": EPS, "error_limit_u": ERROR_LIMIT_U}
    statuses, problems = [], []
    for dtype in ctx.half_dtypes():
        norm, impl = _gemma_rmsnorm(hidden, dtype, ctx.device)
        values["implementation"] = impl
        limit = ERROR_LIMIT_U * unit_roundoff(dtype)
        for kind in ("tiny", "large"):
            key = f"{dtype_name(dtype)}_{kind}"
            x = activations(kind, rows, hidden, dtype).to(ctx.device)
            with torch.no_grad():
                out = norm(x)
                weight = norm.weight.detach()
                naive = _naive_half(x, weight)
            ref = rmsnorm_reference(x, weight)
            nonfinite = int((~torch.isfinite(out)).sum())
            err = normwise_error(out, ref) if not nonfinite else float("inf")
            values[f"{key}_nonfinite"] = nonfinite
            values[f"{key}_max_rel_error"] = err
            values[f"{key}_naive_nonfinite"] = int((~torch.isfinite(naive)).sum())
            values[f"{key}_naive_max_rel_error"] = normwise_error(torch.nan_to_num(naive), ref)
            ok = nonfinite == 0 and err <= limit
            statuses.append(PASS if ok else FAIL)
            if not ok:
                problems.append(f"{key}: {nonfinite} non-finite, max error {err:.3g} (limit {limit:.3g})")
    return result("rmsnorm_stability", worst(statuses), values, "; ".join(problems))
