"""Tiny random-initialised Gemma configs (one per family) and a sentencepiece tokenizer trained at run time."""

from __future__ import annotations

import io
import itertools
import string
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

TINY_FAMILIES = {
    "tiny-gemma": "gemma",
    "tiny-gemma2": "gemma2",
    "tiny-gemma3": "gemma3_text",
    "tiny-gemma4": "gemma4_text",
}
TINY_VOCAB = 1000  # the smallest vocab: the sample needs ~750 (characters + 256 byte pieces); the rest are merges
MAX_VOCAB = 8192  # the largest: embedding rows stay cheap on a CPU (8192 x 128)
# Always pieces, whatever the data: the space marker (a byte-fallback space would not decode back to a space)
# and printable ASCII, as in Gemma's own vocabulary.
ALWAYS_CHARS = "\u2581" + string.ascii_letters + string.digits + string.punctuation
FIXED_PIECES = 4 + 256 + len(ALWAYS_CHARS)  # pad/eos/bos/unk, the byte-fallback pieces, ALWAYS_CHARS
ALL_CHARS_UP_TO = 1000  # a character set this small is covered whole (coverage 1.0)
LARGE_SET_COVERAGE = 0.9995  # above it: sentencepiece's advice for CJK; the rarest characters become bytes
MIN_MERGES = 128
TOKENIZER_TEXT_CHARS = 2048  # each text's first characters train the tokenizer (sentencepiece drops long lines)


def is_tiny(model_id: str) -> bool:
    return model_id in TINY_FAMILIES


def tiny_config_kwargs(model_type: str, vocab_size: int) -> dict:
    """Shape of the tiny models: 2 layers, hidden 128, 4 query heads, 1 KV head, head_dim 32."""
    kwargs = dict(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=1024,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    if model_type in ("gemma2", "gemma3_text", "gemma4_text"):
        kwargs.update(sliding_window=128, query_pre_attn_scalar=32, layer_types=["sliding_attention", "full_attention"])
    if model_type == "gemma4_text":
        del kwargs["query_pre_attn_scalar"]
        kwargs.update(global_head_dim=32, hidden_size_per_layer_input=16, vocab_size_per_layer_input=vocab_size)
    return kwargs


@dataclass(frozen=True)
class TokenizerSize:
    """Vocab and characters for a corpus: every character of a small set, the commonest of a large one."""

    vocab_size: int
    character_coverage: float  # share of the corpus' characters that are pieces; the rest become bytes
    distinct_chars: int
    kept: frozenset  # the characters that get a piece (ALWAYS_CHARS besides)


def tokenizer_size(texts: list[str], max_vocab: int = MAX_VOCAB) -> TokenizerSize:
    """Size the tokenizer from the data: characters kept (coverage), plus merges that grow with the corpus, capped."""
    counts = Counter()
    for text in texts:
        counts.update(text[:TOKENIZER_TEXT_CHARS].replace(" ", "\u2581"))
    distinct = len(counts)
    always = sum(counts.pop(c, 0) for c in ALWAYS_CHARS)
    ranked = counts.most_common()
    total = (always + sum(counts.values())) or 1
    budget = max_vocab - FIXED_PIECES - MIN_MERGES
    target = 1.0 if len(ranked) <= ALL_CHARS_UP_TO else LARGE_SET_COVERAGE
    kept, covered = 0, always
    for _, freq in ranked:
        if kept >= budget or covered / total >= target:
            break
        kept, covered = kept + 1, covered + freq
    merges = min(4096, max(MIN_MERGES, total // 100))
    vocab = min(max_vocab, max(TINY_VOCAB, FIXED_PIECES + kept + merges))
    return TokenizerSize(vocab, covered / total, distinct, frozenset(c for c, _ in ranked[:kept]))


def train_tokenizer(texts: list[str], out_dir: Path, max_vocab: int = MAX_VOCAB) -> Path:
    """Train a Gemma-style BPE sentencepiece model (pad 0, eos 1, bos 2, unk 3, byte fallback) on `texts`,
    sized by `tokenizer_size`: characters left out of it are dropped from the tokenizer's training text
    (sentencepiece itself takes a coverage of 0.98 at least), so they become byte pieces."""
    import sentencepiece as spm

    size = tokenizer_size(texts, max_vocab)
    keep = size.kept | set(ALWAYS_CHARS) | {" "}
    sentences = (t[:TOKENIZER_TEXT_CHARS] for t in texts)
    if size.character_coverage < 1.0:
        sentences = ("".join(c for c in t if c in keep) for t in sentences)
    # Every required character occurs at least once: sentencepiece 0.2.0 (the pin of the torch 2.3-2.6 lines)
    # aborts the whole process on a required character the corpus lacks (bpe_model_trainer.cc "freq > 0").
    sentences = itertools.chain(sentences, [" ".join(ALWAYS_CHARS[1:])])
    out_dir.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=sentences,
        model_writer=buf,
        vocab_size=size.vocab_size,
        model_type="bpe",
        max_sentence_length=4 * TOKENIZER_TEXT_CHARS,
        character_coverage=1.0,
        required_chars=ALWAYS_CHARS,
        byte_fallback=True,
        hard_vocab_limit=False,
        split_digits=True,
        # Gemma's own normalizer spec; GemmaTokenizer (fast) assumes it (probe tokenizer_integrity).
        normalization_rule_name="identity",
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        pad_piece="<pad>",
        eos_piece="<eos>",
        bos_piece="<bos>",
        unk_piece="<unk>",
        num_threads=1,
        minloglevel=2,
    )
    model_file = out_dir / "tokenizer.model"
    model_file.write_bytes(buf.getvalue())
    return model_file
