"""Random-weight classifiers of real model shapes for the `speed` preset: built from a config, nothing downloaded.

`gemma-2b-shape`: Gemma 2B's decoder (hidden 2048, 18 layers, 8 heads, 1 KV head, head_dim 256, intermediate
16384, vocab 256000; transformers' GemmaConfig fields) with transformers' GemmaForSequenceClassification.
`gemma4-e2b-shape`: transformers' Gemma4TextConfig defaults (its docstring calls them similar to
google/gemma-4-e2b-it) with this workload's LastTokenClassifier. `tiny-shape`: a 2-layer Gemma for the CPU.
"""

from __future__ import annotations

import torch
from torch import nn

from .classifier import LastTokenClassifier

PAD, EOS, BOS = 0, 1, 2
SHAPES = {
    "gemma-2b-shape": (
        "gemma",
        dict(
            vocab_size=256000,
            hidden_size=2048,
            intermediate_size=16384,
            num_hidden_layers=18,
            num_attention_heads=8,
            num_key_value_heads=1,
            head_dim=256,
        ),
    ),
    "gemma4-e2b-shape": ("gemma4_text", {}),
    "tiny-shape": (
        "gemma",
        dict(
            vocab_size=1000,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=16,
        ),
    ),
}


def is_shape(model: str) -> bool:
    return model in SHAPES


def _config(name: str):
    family, fields = SHAPES[name]
    ids = dict(pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS)
    if family == "gemma4_text":
        from transformers import Gemma4TextConfig

        return family, Gemma4TextConfig(**fields, **ids)
    from transformers import GemmaConfig

    return family, GemmaConfig(**fields, **ids)


def vocab_size(name: str) -> int:
    return _config(name)[1].vocab_size


def build(
    name: str, num_labels: int, *, torch_dtype: torch.dtype, device: torch.device, seed: int, attn: str | None = None
) -> tuple[nn.Module, str]:
    """(the random-weight classifier of shape `name` on `device` in `torch_dtype`, its family); seeded."""
    family, config = _config(name)
    torch.manual_seed(seed)
    attn = attn or "sdpa"
    with torch.device(device):
        if family == "gemma4_text":
            from transformers import Gemma4TextModel

            model = LastTokenClassifier(Gemma4TextModel._from_config(config, attn_implementation=attn), num_labels)
        else:
            from transformers import GemmaForSequenceClassification

            config.num_labels = num_labels
            model = GemmaForSequenceClassification._from_config(config, attn_implementation=attn)
    return model.to(torch_dtype), family
