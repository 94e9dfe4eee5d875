"""Training-speed levers that are more than batching: packed (padding-free) classification and compiled layers.

Everything here is plain PyTorch + transformers (no vendor-specific package): it runs on CUDA, ROCm and CPU."""

from __future__ import annotations

import torch
from torch import nn


def classifier_parts(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    """(decoder backbone, `score` head) of a (LoRA-wrapped) classifier: transformers' *ForSequenceClassification
    and our LastTokenClassifier both keep them as `.model` and `.score`."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not (hasattr(inner, "model") and hasattr(inner, "score")):
        raise TypeError(f"{type(inner).__name__} has no .model backbone and .score head: cannot run it packed")
    return inner.model, inner.score


def packing_supported() -> bool:
    """Whether the installed transformers masks packed sequences by their position ids (masking_utils, 4.5x+).
    Older releases would let samples in one row attend to each other, so packing must not be used there."""
    try:
        from transformers.masking_utils import find_packed_sequence_indices  # noqa: F401
    except ImportError:
        return False
    return True


def packed_logits(
    model: nn.Module,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    ends: torch.Tensor,
    cu_seqlens: torch.Tensor | None = None,
    max_length: int | None = None,
) -> torch.Tensor:
    """Logits of every sample of a packed batch (`batching.collate_packed`): the backbone runs without an
    attention mask, so transformers derives a per-sample causal mask from the restarting position ids
    (no attention across samples), or, with `cu_seqlens` (workload.training.varlen, its attention switched on), the
    varlen kernels take the sample boundaries instead of a mask (`max_length`: the longest sequence in the batch,
    pad sequences included; the row length when not given); each sample is pooled at its own last token, as the
    padded path does."""
    backbone, score = classifier_parts(model)
    longest = min(input_ids.shape[1], max_length or input_ids.shape[1])
    varlen = (
        {}
        if cu_seqlens is None
        else {
            "cu_seq_lens_q": cu_seqlens,
            "cu_seq_lens_k": cu_seqlens,
            "max_length_q": longest,
            "max_length_k": longest,
        }
    )
    hidden = backbone(input_ids=input_ids, position_ids=position_ids, use_cache=False, **varlen).last_hidden_state
    pooled = hidden.reshape(-1, hidden.shape[-1]).index_select(0, ends)
    return score(pooled.to(score.weight.dtype if hasattr(score, "weight") else pooled.dtype))


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated decoder layers (every `nn.ModuleList` named `layers`)."""
    return [
        layer
        for name, module in model.named_modules()
        if name.split(".")[-1] == "layers" and isinstance(module, nn.ModuleList)
        for layer in module
    ]


#: Set in an image whose torch cannot compile (its value says why); the training loop then stays eager.
COMPILE_UNAVAILABLE_ENV = "ENVBUILD_TORCH_COMPILE_UNAVAILABLE"
#: Set by envbuild where the image's torch cannot compile on a host with no GPU (a known regression of the wheel).
COMPILE_NEEDS_GPU_ENV = "ENVBUILD_TORCH_COMPILE_NEEDS_GPU"


def compile_layers(model: nn.Module, *, backend: str = "inductor") -> int:
    """Regional compilation: `torch.compile` each decoder layer (static shapes, one graph per input shape,
    shared by all layers since they run the same code), leaving the data-dependent parts (masks, pooling) eager.
    Returns the number of layers compiled."""
    import torch._dynamo

    layers = decoder_layers(model)
    if not layers:
        raise TypeError(f"{type(model).__name__}: no decoder layers found to compile")
    # One cache entry per bucket shape (and train/eval mode): allow more than the default before falling back.
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    if hasattr(torch._dynamo.config, "recompile_limit"):
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    for layer in layers:
        layer.compile(backend=backend, dynamic=False)
    return len(layers)


def uncompile_layers(model: nn.Module) -> None:
    """Back to eager layers (evaluation and saving then run the plain modules)."""
    for layer in decoder_layers(model):
        layer._compiled_call_impl = None
