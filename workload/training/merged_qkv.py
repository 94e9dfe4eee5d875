"""Merged q/k/v projections for LoRA training: in each attention block, one GEMM over the concatenated frozen
q/k/v weights and one over the concatenated LoRA A matrices, with one dropout mask shared by q, k and v, instead
of peft's three base GEMMs, three dropout copies of the input and three A GEMMs.

It changes the numerics only through the shared dropout mask (peft draws one per projection); without dropout
(evaluation, or lora_dropout 0) the outputs equal peft's up to GEMM rounding. The LoRA parameters stay where
peft keeps them (names, optimizer, saved adapters unchanged): q_proj's forward computes all three projections and
hands k_proj and v_proj theirs, which they return when called next with the same input (transformers' attention
calls them in that order); called otherwise, they run peft's own forward."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

NAMES = ("q_proj", "k_proj", "v_proj")


def _plain_lora(module) -> str | None:
    """The single active adapter of a vanilla peft LoRA Linear (no DoRA or other variant, unmerged, no bias);
    None for anything else."""
    if not (hasattr(module, "lora_A") and isinstance(getattr(module, "base_layer", None), nn.Linear)):
        return None
    adapters = list(module.active_adapters)
    if (
        len(adapters) != 1
        or adapters[0] not in module.lora_A
        or adapters[0] in getattr(module, "lora_variant", {})
        or module.merged
        or module.disable_adapters
        or module.base_layer.bias is not None
        or getattr(module, "lora_bias", {}).get(adapters[0], False)
    ):
        return None
    return adapters[0]


def _dropout_p(module, adapter: str) -> float | None:
    dropout = module.lora_dropout[adapter]
    return dropout.p if isinstance(dropout, nn.Dropout) else 0.0 if isinstance(dropout, nn.Identity) else None


def mergeable(attention: nn.Module) -> list[nn.Module]:
    """The q/k/v layers of one attention module that can run merged: plain LoRA ones (two or more, in call
    order, with the same adapter, input width, dropout and weight dtype); [] when fewer qualify. The others
    (no LoRA, another variant) keep their own forward."""
    layers = [getattr(attention, name, None) for name in NAMES]
    layers = [m for m in layers if m is not None and _plain_lora(m)]
    adapters = {_plain_lora(m) for m in layers}
    if len(layers) < 2 or len(adapters) != 1:
        return []
    adapter = adapters.pop()
    same = {
        (
            m.base_layer.in_features,
            m.base_layer.weight.dtype,
            m.base_layer.weight.device,
            m.lora_A[adapter].weight.dtype,
            _dropout_p(m, adapter),
        )
        for m in layers
    }
    return layers if len(same) == 1 and _dropout_p(layers[0], adapter) is not None else []


class _Merged:
    """The merged projections of one attention block and the outputs waiting for k_proj / v_proj."""

    def __init__(self, layers: list[nn.Module]):
        self.layers = layers
        self.adapter = _plain_lora(layers[0])
        self.sizes = [m.base_layer.out_features for m in layers]
        # One frozen weight; the layers' own weights become views of it (no second copy in memory).
        self.weight = torch.cat([m.base_layer.weight.detach() for m in layers])
        at = 0
        for m, size in zip(layers, self.sizes):
            m.base_layer.weight.data = self.weight[at : at + size]
            at += size
        self.pending_input: torch.Tensor | None = None  # the input whose k/v outputs wait in `pending`
        self.pending: dict[int, torch.Tensor] = {}

    def project(self, x: torch.Tensor) -> list[torch.Tensor]:
        first, adapter = self.layers[0], self.adapter
        base = F.linear(x, self.weight).split(self.sizes, dim=-1)
        lora_a = torch.cat([m.lora_A[adapter].weight for m in self.layers])
        dropped = first.lora_dropout[adapter](first._cast_input_dtype(x, lora_a.dtype))
        low = F.linear(dropped, lora_a).split([m.lora_A[adapter].out_features for m in self.layers], dim=-1)
        return [
            (b + m.lora_B[adapter](lo) * m.scaling[adapter]).to(b.dtype) for b, lo, m in zip(base, low, self.layers)
        ]

    def first_forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if args or kwargs:
            return type(self.layers[0]).forward(self.layers[0], x, *args, **kwargs)
        out = self.project(x)
        self.pending_input, self.pending = x, dict(enumerate(out[1:], start=1))
        return out[0]

    def later_forward(self, index: int, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if args or kwargs or self.pending_input is not x or index not in self.pending:
            return type(self.layers[index]).forward(self.layers[index], x, *args, **kwargs)
        out = self.pending.pop(index)
        if not self.pending:  # nothing more waits: drop the reference to the input
            self.pending_input = None
        return out


@contextlib.contextmanager
def merged_qkv_on(model: nn.Module):
    """Every attention block of `model` whose q/k/v are mergeable runs them merged while the block runs;
    yields how many blocks were merged. peft's forwards are restored after (the weights stay views of the merged
    tensor, with the same values)."""
    patched, blocks = [], 0
    try:
        for attention in model.modules():
            layers = mergeable(attention)
            if not layers:
                continue
            merged, blocks = _Merged(layers), blocks + 1
            layers[0].forward = merged.first_forward
            for index, layer in enumerate(layers[1:], start=1):
                layer.forward = (lambda m, i: lambda x, *a, **k: m.later_forward(i, x, *a, **k))(merged, index)
            patched.extend(layers)
        yield blocks
    finally:
        for layer in patched:
            layer.__dict__.pop("forward", None)
