"""Tolerances for comparing two computations of the same math that differ only in the order of their sums.

Two paths through a model (merged and separate projections, packed and padded rows) add the same terms in a
different order, so their results differ by rounding alone. The worst case for summing n terms in floating
point is |error| <= gamma_n * sum(|term|), gamma_n = n*u / (1 - n*u), with u the unit roundoff of the dtype
(Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., section 4.2). A chain of `depth` such
reductions (layers, forward then backward) compounds it to about depth * gamma_n.

The tests compare in float64, where that bound is ~1e-12 for these tiny models: a real bug (a wrong mask, a
dropped LoRA scaling, another row's tokens) changes results by 1e-3 or more, so it still fails, while no
upstream change of summation order can.
"""

from __future__ import annotations

import torch


def reassociation_rtol(dtype: torch.dtype, reduction_size: int, depth: int) -> float:
    """depth * gamma_n for sums of `reduction_size` terms in `dtype`."""
    unit_roundoff = torch.finfo(dtype).eps / 2
    n_u = reduction_size * unit_roundoff
    assert n_u < 0.5, f"a sum of {reduction_size} terms in {dtype} has no useful bound"
    return depth * n_u / (1 - n_u)


def assert_same_math(got: torch.Tensor, want: torch.Tensor, reduction_size: int, depth: int, msg: str = "") -> None:
    """`got` equals `want` up to reassociation: rtol from `reassociation_rtol`, and atol the same relative
    bound on the largest magnitude (the error of an element that cancels to ~0 is bounded by the terms' size,
    not by its own)."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    rtol = reassociation_rtol(want.dtype, reduction_size, depth)
    atol = rtol * float(want.detach().abs().max()) if want.numel() else 0.0
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=msg or None)


def fp32_loss_rtol(samples_per_step: int, steps: int) -> float:
    """The bound for two float64 training runs' losses: `train` computes the cross-entropy in fp32
    (`logits.float()` in workload's training loop) even for a float64 model, a sum of `samples_per_step`
    per-sample losses each step, so fp32's rounding there, not float64's, bounds their difference."""
    return reassociation_rtol(torch.float32, samples_per_step, steps)
