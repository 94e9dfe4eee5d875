"""Tiny random-initialised Gemma configs (one per family) and a sentencepiece tokenizer trained at run time."""

from __future__ import annotations

import io
from pathlib import Path

TINY_FAMILIES = {"tiny-gemma": "gemma", "tiny-gemma2": "gemma2", "tiny-gemma3": "gemma3_text",
                 "tiny-gemma4": "gemma4_text"}
TINY_VOCAB = 1000  # the sample needs ~750 (characters + 256 byte pieces); the rest become word pieces


def is_tiny(model_id: str) -> bool:
    return model_id in TINY_FAMILIES


def tiny_config_kwargs(model_type: str, vocab_size: int) -> dict:
    """Shape of the tiny models: 2 layers, hidden 128, 4 query heads, 1 KV head, head_dim 32."""
    kwargs = dict(vocab_size=vocab_size, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=1, head_dim=32, max_position_embeddings=1024,
                  pad_token_id=0, eos_token_id=1, bos_token_id=2)
    if model_type in ("gemma2", "gemma3_text", "gemma4_text"):
        kwargs.update(sliding_window=128, query_pre_attn_scalar=32,
                      layer_types=["sliding_attention", "full_attention"])
    if model_type == "gemma4_text":
        del kwargs["query_pre_attn_scalar"]
        kwargs.update(global_head_dim=32, hidden_size_per_layer_input=16, vocab_size_per_layer_input=vocab_size)
    return kwargs


def train_tokenizer(texts: list[str], out_dir: Path, vocab_size: int = TINY_VOCAB) -> Path:
    """Train a Gemma-style BPE sentencepiece model (pad 0, eos 1, bos 2, unk 3, byte fallback) on `texts`."""
    import sentencepiece as spm

    out_dir.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=buf, vocab_size=vocab_size, model_type="bpe",
        character_coverage=1.0, byte_fallback=True, hard_vocab_limit=False, split_digits=True,
        # Gemma's own normalizer spec; GemmaTokenizer (fast) assumes it (probe tokenizer_integrity).
        normalization_rule_name="identity", add_dummy_prefix=False, remove_extra_whitespaces=False,
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
        unk_piece="<unk>", num_threads=1, minloglevel=2)
    model_file = out_dir / "tokenizer.model"
    model_file.write_bytes(buf.getvalue())
    return model_file
