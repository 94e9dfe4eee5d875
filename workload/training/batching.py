"""Tokenised examples into padded batches: length-bucketed so that few distinct shapes occur."""

from __future__ import annotations

import random

import torch


ENCODE_CHUNK = 512  # texts per tokenizer call: progress can be reported between calls


def encode_counted(tokenizer, texts: list[str], max_length: int, on_progress=None) -> tuple[list[list[int]], int]:
    """Token ids per text (with the tokenizer's special tokens), truncated to `max_length`, ending in <eos>,
    and how many texts were longer than that. `on_progress(done, total)` is called after each chunk.

    The classifier pools the last non-pad token; ending every text with the same <eos> makes that position
    a summary of the text instead of the embedding of whatever word happened to come last."""
    eos = tokenizer.eos_token_id
    limit = max_length - (eos is not None)
    out, truncated = [], 0
    for start in range(0, len(texts), ENCODE_CHUNK):
        chunk = tokenizer(
            list(texts[start : start + ENCODE_CHUNK]), add_special_tokens=True, truncation=True, max_length=limit + 1
        )["input_ids"]
        for ids in chunk:
            truncated += len(ids) > limit
            ids = list(ids[:limit])
            out.append(ids + ([eos] if eos is not None and (not ids or ids[-1] != eos) else []))
        if on_progress is not None:
            on_progress(len(out), len(texts))
    return out, truncated


def encode(tokenizer, texts: list[str], max_length: int) -> list[list[int]]:
    """`encode_counted` without the count."""
    return encode_counted(tokenizer, texts, max_length)[0]


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
        order = [
            i
            for start in range(0, len(order), window)
            for i in sorted(order[start : start + window], key=lambda j: lengths[j])
        ]
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if bucket_batches > 1:
        rng.shuffle(batches)
    return batches


def eval_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    order = sorted(range(len(lengths)), key=lambda j: lengths[j])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def collate(
    ids: list[list[int]], pad_id: int, multiple: int, max_length: int, pin: bool = False, width: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded input_ids and attention_mask, length rounded up to `multiple` (or exactly `width`)."""
    width = width or padded_length(max(len(x) for x in ids), multiple, max_length)
    input_ids = torch.full((len(ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for row, x in enumerate(ids):
        input_ids[row, : len(x)] = torch.tensor(x, dtype=torch.long)
        mask[row, : len(x)] = 1
    if pin:
        input_ids, mask = input_ids.pin_memory(), mask.pin_memory()
    return input_ids, mask


def bucket_length(length: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket length that holds `length` (the largest bucket when none does)."""
    return next((b for b in buckets if b >= length), buckets[-1])


def token_budget_batches(
    lengths: list[int], tokens_per_step: int, buckets: tuple[int, ...], *, seed: int
) -> list[list[int]]:
    """One epoch of batches with a padded-token budget: each batch holds samples of one bucket length L
    (padded to L), `tokens_per_step // L` of them, so only `len(buckets)` shapes occur (plus each bucket's
    last, smaller batch). Batch order is shuffled."""
    rng = random.Random(seed)
    by_bucket: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        by_bucket.setdefault(bucket_length(n, buckets), []).append(i)
    batches = []
    for bucket in sorted(by_bucket):
        members = by_bucket[bucket]
        rng.shuffle(members)
        size = max(1, tokens_per_step // bucket)
        batches += [members[i : i + size] for i in range(0, len(members), size)]
    rng.shuffle(batches)
    return batches


def packed_steps(
    lengths: list[int], row_length: int, rows_per_step: int, *, seed: int, window_steps: int = 8
) -> list[list[list[int]]]:
    """One epoch of packed steps: each step is `rows_per_step` rows (lists of sample indices) whose lengths sum
    to at most `row_length`. Samples are shuffled, then packed first-fit-decreasing inside windows of about
    `window_steps` steps' worth of tokens (nearly full rows, still random groups); step order is shuffled.
    Only the epoch's last step may have fewer (or emptier) rows."""
    if max(lengths, default=0) > row_length:
        raise ValueError(f"a sample of {max(lengths)} tokens does not fit a packed row of {row_length}")
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    window_tokens = window_steps * rows_per_step * row_length
    rows: list[list[int]] = []
    start = 0
    while start < len(order):
        end, tokens = start, 0
        while end < len(order) and tokens < window_tokens:
            tokens += lengths[order[end]]
            end += 1
        rows += pack_sample_rows(lengths, order[start:end], row_length)
        start = end
    steps = [rows[i : i + rows_per_step] for i in range(0, len(rows), rows_per_step)]
    rng.shuffle(steps)
    return steps


def pack_sample_rows(lengths: list[int], samples: list[int], cap: int) -> list[list[int]]:
    """One step's samples as rows of at most `cap` tokens (first-fit decreasing: as few rows as it finds, the
    longest samples first); every sample once."""
    rows: list[list[int]] = []
    space: list[int] = []
    for i in sorted(samples, key=lambda j: -lengths[j]):
        if lengths[i] > cap:
            raise ValueError(f"a sample of {lengths[i]} tokens does not fit a packed row of {cap}")
        slot = next((k for k, free in enumerate(space) if free >= lengths[i]), None)
        if slot is None:
            rows.append([i])
            space.append(cap - lengths[i])
        else:
            rows[slot].append(i)
            space[slot] -= lengths[i]
    return rows


def collate_packed(
    rows: list[list[list[int]]],
    pad_id: int,
    row_length: int,
    n_rows: int,
    pin: bool = False,
    tail_chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Padding-free batch: each row concatenates whole samples (`rows[r]` = their token id lists), the rest of
    the row is pad; always `n_rows` x `row_length` (one shape). Position ids restart at 0 for every sample
    (and for the pad tail, every `tail_chunk` tokens of it when given, so that no pad sequence is longer than
    the longest sample), which is how transformers recognises packed sequences and masks attention to each
    sample's own tokens. Returns input_ids, position_ids and each sample's last-token index into the
    flattened (n_rows * row_length) batch, in row order."""
    input_ids = torch.full((n_rows, row_length), pad_id, dtype=torch.long)
    position_ids = torch.zeros((n_rows, row_length), dtype=torch.long)
    ends = []
    for r in range(n_rows):
        samples, at = rows[r] if r < len(rows) else [], 0
        for x in samples:
            input_ids[r, at : at + len(x)] = torch.tensor(x, dtype=torch.long)
            position_ids[r, at : at + len(x)] = torch.arange(len(x))
            at += len(x)
            ends.append(r * row_length + at - 1)
        tail = torch.arange(row_length - at)
        position_ids[r, at:] = tail % tail_chunk if tail_chunk else tail
    ends = torch.tensor(ends, dtype=torch.long)
    if pin:
        input_ids, position_ids, ends = input_ids.pin_memory(), position_ids.pin_memory(), ends.pin_memory()
    return input_ids, position_ids, ends
