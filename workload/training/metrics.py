"""Classification quality and throughput arithmetic."""

from __future__ import annotations

import numpy as np


def accuracy(preds, labels) -> float:
    preds, labels = np.asarray(preds), np.asarray(labels)
    return float((preds == labels).mean()) if len(labels) else 0.0


def macro_f1(preds, labels, num_labels: int) -> float:
    """Unweighted mean of per-class F1 over all `num_labels` classes (a class never predicted nor present: 0)."""
    preds, labels = np.asarray(preds), np.asarray(labels)
    scores = []
    for k in range(num_labels):
        tp = int(((preds == k) & (labels == k)).sum())
        fp = int(((preds == k) & (labels != k)).sum())
        fn = int(((preds != k) & (labels == k)).sum())
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return float(np.mean(scores))


def flops_per_token(non_embedding_params: int) -> float:
    """LoRA training on a frozen base: forward 2N + input-gradient backward 2N = 4N FLOPs per non-pad token
    (no weight gradients for the frozen base; LoRA/attention-score terms and recomputation are not counted)."""
    return 4.0 * non_embedding_params


def attention_layers(model) -> list[tuple[int, int | None]]:
    """(query width = heads x head_dim, sliding window or None) of every attention layer of a (LoRA-wrapped)
    decoder: read off each `self_attn` module's `q_proj` output width, so per-layer head_dims (Gemma 4's global
    layers) count as they are."""
    out = []
    for name, module in model.named_modules():
        q_proj = getattr(module, "q_proj", None)
        if name.split(".")[-1] != "self_attn" or q_proj is None:
            continue
        width = getattr(q_proj, "out_features", None) or getattr(getattr(q_proj, "base_layer", None), "out_features")
        out.append((int(width), getattr(module, "sliding_window", None) or None))
    return out


def attention_flops(sample_lengths, layers: list[tuple[int, int | None]]) -> float:
    """Attention-score FLOPs of training on these samples, the PaLM paper's appendix B convention: 12 x L x H x Q x T
    per token (QK^T and AV, 2 FLOPs a multiply-add, forward + a backward of twice that), with T the sample's own
    length (each sample attends only to itself; no halving for causality), capped at a sliding window."""
    total = 0.0
    for width, window in layers:
        total += 12.0 * width * sum(n * (min(n, window) if window else n) for n in sample_lengths)
    return total


def mfu_from_flops(flops_per_s: float, peak_tflops: float | None, devices: int = 1) -> float | None:
    """Achieved FLOP/s over the devices' dense bf16/fp16 peak; None when the peak is unknown."""
    if not peak_tflops or flops_per_s <= 0:
        return None
    return flops_per_s / (peak_tflops * 1e12 * devices)


def mfu(tokens_per_s: float, non_embedding_params: int, peak_tflops: float | None, devices: int = 1) -> float | None:
    """Achieved model FLOP/s over the devices' dense bf16/fp16 peak; None when the peak is unknown."""
    if not peak_tflops or tokens_per_s <= 0:
        return None
    return tokens_per_s * flops_per_token(non_embedding_params) / (peak_tflops * 1e12 * devices)
