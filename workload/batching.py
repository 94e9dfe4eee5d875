"""Tokenised examples into padded batches: length-bucketed so that few distinct shapes occur."""

from __future__ import annotations

import random

import torch


def encode(tokenizer, texts: list[str], max_length: int) -> list[list[int]]:
    """Token ids per text (with the tokenizer's special tokens), truncated, ending in <eos>.

    The classifier pools the last non-pad token; ending every text with the same <eos> makes that position
    a summary of the text instead of the embedding of whatever word happened to come last."""
    eos = tokenizer.eos_token_id
    encoded = tokenizer(list(texts), add_special_tokens=True, truncation=True,
                        max_length=max_length - (eos is not None))
    return [list(ids) + ([eos] if eos is not None and (not ids or ids[-1] != eos) else [])
            for ids in encoded["input_ids"]]


def padded_length(length: int, multiple: int, max_length: int) -> int:
    return min(max_length, -(-length // multiple) * multiple) if multiple > 1 else length


def train_batches(lengths: list[int], batch_size: int, *, seed: int, bucket_batches: int) -> list[list[int]]:
    """One epoch of index batches: shuffle, sort by length inside windows of `bucket_batches` batches,
    cut into batches, shuffle the batch order. `bucket_batches <= 1` gives plain random batches."""
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    if bucket_batches > 1:
        window = batch_size * bucket_batches
        order = [i for start in range(0, len(order), window)
                 for i in sorted(order[start:start + window], key=lambda j: lengths[j])]
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    if bucket_batches > 1:
        rng.shuffle(batches)
    return batches


def eval_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    order = sorted(range(len(lengths)), key=lambda j: lengths[j])
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def collate(ids: list[list[int]], pad_id: int, multiple: int, max_length: int,
            pin: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded input_ids and attention_mask, length rounded up to `multiple`."""
    width = padded_length(max(len(x) for x in ids), multiple, max_length)
    input_ids = torch.full((len(ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for row, x in enumerate(ids):
        input_ids[row, :len(x)] = torch.tensor(x, dtype=torch.long)
        mask[row, :len(x)] = 1
    if pin:
        input_ids, mask = input_ids.pin_memory(), mask.pin_memory()
    return input_ids, mask
