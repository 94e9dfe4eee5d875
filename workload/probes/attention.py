"""SDPA against math attention and an fp64 reference, head_dim 256 (SDPA wrong in half
precision: pytorch#119772; flash attention head_dim > 128 on MI250: ROCm/flash-attention#51).

Causal attention with Gemma's head_dim 256 in fp16/bf16, through the backend torch picks by
default and through each backend forced in turn (math, flash, memory-efficient, cuDNN on GPU).
A backend that cannot take the inputs (e.g. flash attention with head_dim > 128 on MI250) is
reported unavailable, not failed: torch falls back. Every output is compared with an fp64
reference computed from the same half-precision q, k, v.

error = max|out - ref| / max|v|. Attention outputs are convex combinations of rows of v, so
max|v| bounds them; rounding the output and the probabilities to the half dtype costs about
u·max|v|, and half-precision scores (older math backends) a few u more. The limit is 8u
(3.9e-3 fp16, 3.1e-2 bf16); wrong results such as pytorch#119772 are O(0.1..1).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

from ._common import FAIL, PASS, SKIP, ProbeContext, dtype_name, result, synchronize, unit_roundoff, worst

HEAD_DIM = 256
ERROR_LIMIT_U = 8.0


def attention_inputs(batch: int, heads: int, seq: int, dtype: torch.dtype):
    gen = torch.Generator().manual_seed(3)
    return tuple(torch.randn(batch, heads, seq, HEAD_DIM, generator=gen).to(dtype) for _ in range(3))


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal softmax(q k^T / sqrt(d)) v in fp64 on the CPU."""
    q, k, v = (t.to("cpu", torch.float64) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    seq = q.shape[-2]
    mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


def attention_error(out: torch.Tensor, ref: torch.Tensor, v: torch.Tensor) -> float:
    out = out.to("cpu", torch.float64)
    if not torch.isfinite(out).all():
        return float("inf")
    return float((out - ref).abs().max() / v.to(torch.float64).abs().max())


def _backends(on_gpu: bool) -> dict:
    from torch.nn.attention import SDPBackend

    names = {"math": "MATH", "flash": "FLASH_ATTENTION"}  # the CPU has these two
    if on_gpu:
        names.update(efficient="EFFICIENT_ATTENTION", cudnn="CUDNN_ATTENTION")
    return {key: getattr(SDPBackend, attr) for key, attr in names.items() if hasattr(SDPBackend, attr)}


def _sdpa(q, k, v, backend=None) -> torch.Tensor:
    from torch.nn.attention import sdpa_kernel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about each reason a backend declines
        if backend is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            with sdpa_kernel([backend]):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    synchronize(q.device)
    return out


def sdpa_vs_math(ctx: ProbeContext) -> dict:
    try:
        backends = _backends(ctx.on_gpu)
    except ImportError:
        return result("sdpa_vs_math", SKIP, {}, "torch.nn.attention.sdpa_kernel is absent (torch < 2.3)")
    batch, heads, seq = (2, 8, 1024) if ctx.on_gpu else (1, 2, 64)
    values: dict = {"shape": [batch, heads, seq, HEAD_DIM], "causal": True, "error_limit_u": ERROR_LIMIT_U}
    statuses, problems, unavailable = [], [], []
    for dtype in ctx.half_dtypes():
        name = dtype_name(dtype)
        limit = ERROR_LIMIT_U * unit_roundoff(dtype)
        q, k, v = attention_inputs(batch, heads, seq, dtype)
        ref = attention_reference(q, k, v)
        qd, kd, vd = (t.to(ctx.device) for t in (q, k, v))
        outputs = {}
        for key, backend in [("default", None), *backends.items()]:
            try:
                outputs[key] = _sdpa(qd, kd, vd, backend)
            except Exception as exc:  # a forced backend that declines these inputs
                if key in ("default", "math"):
                    raise
                values[f"{name}_{key}_unavailable"] = str(exc).splitlines()[0][:200]
                unavailable.append(f"{name} {key}")
                continue
            err = attention_error(outputs[key], ref, v)
            values[f"{name}_{key}_error"] = err
            ok = err <= limit
            statuses.append(PASS if ok else FAIL)
            if not ok:
                problems.append(f"{name} {key} backend: error {err:.3g} > limit {limit:.3g}")
        values[f"{name}_default_vs_math_max_abs_diff"] = float(
            (outputs["default"].float() - outputs["math"].float()).abs().max()
        )
    message = "; ".join(problems)
    if unavailable:
        message = "; ".join(filter(None, [message, "unavailable for these inputs: " + ", ".join(unavailable)]))
    return result("sdpa_vs_math", worst(statuses), values, message)
