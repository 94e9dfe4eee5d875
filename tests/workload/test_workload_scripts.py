"""Tiny-model tokenizers for any script: a large CJK character set and mixed scripts train for real."""

import json
import random
import subprocess
import sys

import pytest

from workload.model.classifier import load_tokenizer
from workload.model.tiny import MAX_VOCAB, tokenizer_size, train_tokenizer

CJK_START = 0x4E00


def _cjk_rows(n_per_label=200, chars_per_label=3000, length=40, seed=0):
    """Two labels drawn from disjoint CJK blocks: > 5,000 distinct characters, most of them rare."""
    rng = random.Random(seed)
    return [
        {
            "text": "".join(chr(CJK_START + offset + rng.randrange(chars_per_label)) for _ in range(length)),
            "label": label,
        }
        for label, offset in (("a", 0), ("b", chars_per_label))
        for _ in range(n_per_label)
    ]


_WORDS = {
    "pos": ["good", "хорошо", "好", "جيد", "😀", "great", "отлично", "棒", "ممتاز", "🎉"],
    "neg": ["bad", "плохо", "坏", "سيء", "😡", "awful", "ужасно", "差", "رهيب", "💔"],
}
_FILLER = ["the", "day", "и", "это", "今天", "我们", "في", "هذا", "🙂", "🚀", "Straße", "café", "ok", "1984"]


def _mixed_rows(n_per_label=120, seed=0):
    """Latin, CJK, Cyrillic, Arabic and emoji in every text; the label is carried by words of each script."""
    rng = random.Random(seed)
    rows = []
    for label, words in _WORDS.items():
        for _ in range(n_per_label):
            tokens = rng.sample(words, 2) + rng.sample(_FILLER, 4)
            rng.shuffle(tokens)
            rows.append({"text": " ".join(tokens), "label": label})
    return rows


def _write(path, rows):
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    return path


def _train(data, out):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "workload",
            "train",
            "--preset",
            "smoke",
            "--data",
            str(data),
            "--labels",
            "auto",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_large_character_set_keeps_the_common_characters_and_falls_back_to_bytes(tmp_path):
    texts = [r["text"] for r in _cjk_rows()]
    size = tokenizer_size(texts)
    assert size.distinct_chars > 5000
    assert size.character_coverage < 1.0 and len(size.kept) < size.distinct_chars
    assert size.vocab_size <= MAX_VOCAB
    small = tokenizer_size(texts, max_vocab=2000)  # capped: most characters become byte pieces
    assert small.vocab_size <= 2000 and len(small.kept) < 2000
    train_tokenizer(texts, tmp_path, max_vocab=2000)
    tok = load_tokenizer(tmp_path)
    assert tok.vocab_size <= 2000  # (transformers adds a <mask> token after it)
    for text in texts[:20] + ["mixed: Привет, 世界! مرحبا 👋"]:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == text  # lossless: rare characters as bytes, spaces as spaces


@pytest.mark.parametrize("rows", [_cjk_rows, _mixed_rows], ids=["cjk-5000-chars", "mixed-scripts"])
def test_smoke_training_passes_on_any_script(tmp_path, rows):
    data = _write(tmp_path / "data.jsonl", rows())
    proc = _train(data, tmp_path / "run")
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert proc.returncode == 0, (result["error"], proc.stderr[-2000:])
    assert result["status"] == "pass"
    assert result["metrics"]["eval_after"]["accuracy"] >= 0.9
    tokenizer = next(p for p in result["probes"] if p["name"] == "tokenizer_integrity")
    assert tokenizer["status"] == "pass"
