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


def mfu(tokens_per_s: float, non_embedding_params: int, peak_tflops: float | None, devices: int = 1) -> float | None:
    """Achieved model FLOP/s over the devices' dense bf16/fp16 peak; None when the peak is unknown."""
    if not peak_tflops or tokens_per_s <= 0:
        return None
    return tokens_per_s * flops_per_token(non_embedding_params) / (peak_tflops * 1e12 * devices)
