"""Tokenizer integrity: lossless round trip of Chinese emotion text, agreement with a second encoder.

The second encoder is the slow (sentencepiece-backed) tokenizer where
transformers still has one (4.x); transformers 5 loads every tokenizer as the fast,
tokenizers-backed class, so there the fast tokenizer is compared with the raw sentencepiece
model (tokenizer.model) it was converted from; `values["mode"]` says which comparison ran.
"""

from __future__ import annotations

import os
from typing import Any

from ._common import FAIL, PASS, SKIP, ProbeContext, result

SAMPLES = [
    "我今天非常开心，终于拿到了录取通知书！",
    "他的所作所为让我感到愤怒。",
    "听到这个消息，我很难过，也很悲伤。",
    "走夜路的时候，我总是感到害怕和恐惧。",
    "真没想到，结果竟然如此令人惊讶！",
    "这种虚伪的行为让人厌恶、恶心。",
    "今天天气还行，没什么特别的。",
    "我爱 Gemma 模型😊，版本 2.0 很棒。",
    "「快乐」《忧伤》——惊喜…愤慨？",
    "龘靐齉爩，生僻字也要原样还原。",
]


def _bare_sentencepiece_dir(path: str) -> bool:
    """Only a tokenizer.model (the workload's tiny tokenizer): AutoTokenizer cannot tell its class."""
    return os.path.isfile(os.path.join(path, "tokenizer.model")) and not os.path.isfile(
        os.path.join(path, "tokenizer_config.json")
    )


def _load_tokenizer(path: str, use_fast: bool = True):
    import transformers

    if _bare_sentencepiece_dir(path):
        name = "GemmaTokenizerFast" if use_fast else "GemmaTokenizer"  # transformers 5: GemmaTokenizer only
        return (getattr(transformers, name, None) or transformers.GemmaTokenizer).from_pretrained(path)
    return transformers.AutoTokenizer.from_pretrained(path, use_fast=use_fast)


def load_tokenizer(tokenizer: Any):
    """A tokenizer object as given, or loaded from a directory."""
    if isinstance(tokenizer, (str, os.PathLike)):
        return _load_tokenizer(os.fspath(tokenizer))
    return tokenizer


def _source_dir(tok: Any) -> str | None:
    path = getattr(tok, "name_or_path", None)
    return path if path and os.path.isdir(path) else None


def _sentencepiece_file(tok: Any) -> str | None:
    candidates = [getattr(tok, "vocab_file", None)]
    if _source_dir(tok):
        candidates.append(os.path.join(_source_dir(tok), "tokenizer.model"))
    return next((c for c in candidates if c and os.path.isfile(c)), None)


def _slow_fast_pair(tok: Any):
    """(slow, fast) tokenizers from the same files on transformers 4.x, else None."""
    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5 or not _source_dir(tok):
        return None
    other = _load_tokenizer(_source_dir(tok), use_fast=not tok.is_fast)
    if other.is_fast == tok.is_fast:
        return None
    return (other, tok) if tok.is_fast else (tok, other)


def reference_encoder(tok: Any) -> tuple[str, Any, Any]:
    """(mode, encoder under test, reference encode function) for the agreement check."""
    pair = _slow_fast_pair(tok)
    if pair:
        slow, fast = pair
        return "slow_vs_fast", fast, lambda text: slow.encode(text, add_special_tokens=False)
    model_file = _sentencepiece_file(tok)
    if model_file:
        import sentencepiece as spm

        processor = spm.SentencePieceProcessor(model_file=model_file)
        return "fast_vs_sentencepiece", tok, lambda text: processor.encode(text)
    return "none", tok, None


def round_trip_failures(tok: Any, texts: list[str]) -> list[tuple[str, str]]:
    """(text, decoded) for every text that does not survive encode -> decode unchanged."""
    failures = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        decoded = tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        if decoded != text:
            failures.append((text, decoded))
    return failures


def tokenizer_integrity(ctx: ProbeContext, texts: list[str] = SAMPLES) -> dict:
    if ctx.tokenizer is None:
        return result("tokenizer_integrity", SKIP, {}, "no tokenizer given")
    tok = load_tokenizer(ctx.tokenizer)
    mode, under_test, reference = reference_encoder(tok)
    values: dict = {"tokenizer_class": type(tok).__name__, "mode": mode, "n_texts": len(texts)}
    problems = []

    failures = round_trip_failures(under_test, texts)
    values["round_trip_failures"] = len(failures)
    if failures:
        text, decoded = failures[0]
        problems.append(f"{len(failures)} text(s) not restored by decode(encode()), e.g. {text!r} -> {decoded!r}")

    unk = getattr(under_test, "unk_token_id", None)
    values["unk_tokens"] = (
        sum(under_test.encode(t, add_special_tokens=False).count(unk) for t in texts) if unk is not None else 0
    )
    if values["unk_tokens"]:
        problems.append(f"{values['unk_tokens']} unknown token(s): characters are lost (train with byte_fallback)")

    if reference is not None:
        mismatches = [t for t in texts if under_test.encode(t, add_special_tokens=False) != reference(t)]
        values["agreement_mismatches"] = len(mismatches)
        if mismatches:
            problems.append(f"{mode}: {len(mismatches)} text(s) tokenized differently, e.g. {mismatches[0]!r}")
    message = "; ".join(problems)
    if mode == "none":
        unchecked = "no slow tokenizer or tokenizer.model to compare with: agreement not checked"
        message = "; ".join(filter(None, [message, unchecked]))
    return result("tokenizer_integrity", FAIL if problems else PASS, values, message)
