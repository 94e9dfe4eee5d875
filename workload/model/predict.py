"""Classify texts with a saved adapter: base + adapter + head, label and softmax confidence per text."""

from __future__ import annotations

import contextlib
import sys
import warnings

import torch

from ..data.dataset import CHARS_PER_TOKEN_LIMIT
from ..probes import environment as env
from ..training.batching import collate, encode
from ..training.loop import autocast
from .classifier import load_adapter


@contextlib.contextmanager
def _quiet_loading():
    """Loading prints nothing: no progress bars or deprecation warnings, and stray prints go to stderr
    (stdout carries the JSON lines only)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
        warnings.simplefilter("ignore")
        yield


def predict(
    adapter_dir, texts: list[str], *, device_name: str = "auto", dtype: str = "auto", batch_size: int = 32
) -> list[dict]:
    device = env.pick_device(device_name)
    dtype = env.resolve_dtype(dtype, device)
    with _quiet_loading():
        model, tokenizer, labels, meta = load_adapter(adapter_dir, torch_dtype=env.TORCH_DTYPES[dtype])
        model.to(device)
    max_length = int(meta.get("max_length", 512))
    ids = encode(tokenizer, [t[: max_length * CHARS_PER_TOKEN_LIMIT] for t in texts], max_length)
    out = []
    with torch.no_grad():
        for start in range(0, len(ids), batch_size):
            input_ids, mask = collate(ids[start : start + batch_size], tokenizer.pad_token_id, 1, max_length)
            with autocast(device, dtype):
                logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits
            probs = torch.softmax(logits.float(), dim=-1).cpu()
            for text, row in zip(texts[start : start + batch_size], probs):
                k = int(row.argmax())
                out.append(
                    {
                        "text": text,
                        "label": labels[k],
                        "confidence": round(float(row[k]), 6),
                        "scores": {name: round(float(p), 6) for name, p in zip(labels, row)},
                    }
                )
    return out
