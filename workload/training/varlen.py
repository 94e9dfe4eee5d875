"""Packed rows without a dense mask: each sample attends to its own tokens through variable-length attention
kernels that take cumulative sequence lengths instead of a row x row mask, so attention costs sum(len^2)
rather than rows x row_length^2.

Plain PyTorch, registered as a transformers attention implementation (`AttentionInterface`):
- head_dim <= 256: `torch.nn.attention.varlen.varlen_attn` (Flash Attention's varlen entry point);
- larger heads (Gemma 4's head_dim-512 global layers, beyond Flash Attention's limit): the memory-efficient
  kernel's varlen form (`aten._efficient_attention_forward` with cu_seqlens), which has a backward.
Both are built into PyTorch's CUDA and ROCm wheels (ROCm through AOTriton/CK); the CPU has neither."""

from __future__ import annotations

import contextlib
import functools
import inspect

import torch
from torch import nn

NAME = "envbuild_varlen"
FLASH_MAX_HEAD_DIM = 256
#: cu_seqlens is padded (with empty sequences) to a multiple of this many sequences: compiled layers see a few
#: shapes instead of one per sample count.
SEQUENCE_BUCKET = 64


def varlen_available() -> str | None:
    """None when this torch has the varlen entry point, else why not."""
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError as e:
        return f"torch {torch.__version__} has no torch.nn.attention.varlen ({e})"
    return None


def sequence_count(rows: list[list[int]], row_length: int, n_rows: int, tail_chunk: int | None = None) -> int:
    """Sequences the kernels see in a packed micro-batch (`rows[r]` = the lengths packed in row r): every
    sample, plus each row's pad tail (its own sequence: position ids restart there; one per `tail_chunk` tokens
    of it when given, as `batching.collate_packed` lays it out), padded up to SEQUENCE_BUCKET."""
    count = 0
    for r in range(n_rows):
        lengths = rows[r] if r < len(rows) else []
        tail = row_length - sum(lengths)
        count += len(lengths) + (-(-tail // tail_chunk) if tail_chunk else tail > 0)
    return -(-count // SEQUENCE_BUCKET) * SEQUENCE_BUCKET


def cu_seqlens(position_ids: torch.Tensor, sequences: int) -> torch.Tensor:
    """Cumulative sequence starts (int32, `sequences` + 1 entries) of a packed batch whose position ids restart
    at 0 for each sample and for each row's pad tail; the unused tail entries repeat the total (empty sequences)."""
    flat = position_ids.reshape(-1)
    starts = torch.nonzero(flat == 0).reshape(-1)
    if starts.numel() > sequences:
        raise ValueError(f"{starts.numel()} sequences in the batch, more than the {sequences} planned")
    out = torch.full((sequences + 1,), flat.numel(), dtype=torch.int32)
    out[: starts.numel()] = starts.to(torch.int32)
    return out


@functools.cache
def _flash_takes_gqa() -> bool:
    """Whether varlen_attn shares key/value heads itself (`enable_gqa`: not in torch 2.11, in 2.13)."""
    from torch.nn.attention.varlen import varlen_attn

    return "enable_gqa" in inspect.signature(varlen_attn).parameters


def _flash(q, k, v, cu, max_len, scale, sliding_window):
    from torch.nn.attention.varlen import varlen_attn

    window = (sliding_window - 1 if sliding_window else -1, 0)  # transformers' window: q - kv < sliding_window
    if not _flash_takes_gqa() and k.shape[1] != q.shape[1]:
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], 1) for t in (k, v))
    extra = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    return varlen_attn(q, k, v, cu, cu, max_len, max_len, scale=scale, window_size=window, **extra)


# Outside compiled graphs: inductor cannot trace this kernel's backward in torch 2.11 ("meta__efficient_attention_
# backward() got multiple values for argument 'scale'", H200, bench/results/h200-train-speed-gemma4-run3.json), so
# the layers that use it compile as two graphs around it.
@torch.compiler.disable
def _mem_efficient(q, k, v, cu, max_len, scale, sliding_window):
    if sliding_window:
        raise NotImplementedError(f"head_dim {q.shape[-1]} with a sliding window: no varlen kernel here")
    k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], 1) for t in (k, v))
    causal_from_top_left = 1
    out = torch.ops.aten._efficient_attention_forward(
        q[None], k[None], v[None], None, cu, cu, max_len, max_len, 0.0, causal_from_top_left, True, scale=scale
    )[0]
    return out[0]


def varlen_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    cu_seq_lens_q=None,
    max_length_q: int | None = None,
    **_,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: query/key/value (batch, heads, seq, head_dim) of packed rows, with
    `cu_seq_lens_q` over the flattened batch; returns (batch, seq, heads, head_dim)."""
    if cu_seq_lens_q is None:
        raise ValueError(f"{NAME} attention runs packed batches only (no cu_seq_lens_q given)")
    if dropout or softcap:
        raise NotImplementedError(f"{NAME} attention has no attention dropout or logit softcapping")
    if query.dtype not in (torch.bfloat16, torch.float16):  # fp32 activations of fp32 weights under autocast
        if not torch.is_autocast_enabled(query.device.type):
            raise TypeError(f"{NAME} attention takes bf16/fp16 inputs, not {query.dtype}")
        half = torch.get_autocast_dtype(query.device.type)
        query, key, value = query.to(half), key.to(half), value.to(half)
    b, h, s, d = query.shape
    q = query.transpose(1, 2).reshape(b * s, h, d)
    k = key.transpose(1, 2).reshape(b * s, key.shape[1], d)
    v = value.transpose(1, 2).reshape(b * s, value.shape[1], d)
    kernel = _flash if d <= FLASH_MAX_HEAD_DIM else _mem_efficient
    out = kernel(q, k, v, cu_seq_lens_q, max_length_q or s, scaling, sliding_window)
    return out.reshape(b, s, h, d), None


def register() -> None:
    """Make NAME a transformers attention implementation (no mask function: masks are then never built)."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, varlen_attention)


@contextlib.contextmanager
def varlen_attention_on(model: nn.Module):
    """Every config in `model` set to the varlen implementation while the block runs (packed training),
    restored after (evaluation runs padded batches with masks)."""
    register()
    configs = {
        id(m.config): m.config for m in model.modules() if hasattr(getattr(m, "config", None), "_attn_implementation")
    }
    before = {key: config._attn_implementation for key, config in configs.items()}
    try:
        for config in configs.values():
            config._attn_implementation = NAME
        yield
    finally:
        for key, config in configs.items():
            config._attn_implementation = before[key]
