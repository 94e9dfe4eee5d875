"""Synthetic, learnable classification data for the `speed` preset: token ids with log-normal lengths (median ~49,
mean ~68, p95 ~187, at most 512), each sample's label planted as three class-specific tokens. A model that trains
correctly learns it; nothing is downloaded or tokenised."""

from __future__ import annotations

import hashlib
import math
import random

PAD, EOS, BOS = 0, 1, 2
FIRST_BODY_TOKEN = 100  # body tokens are drawn from [100, vocab); the planted class tokens lie below


def class_tokens(num_labels: int) -> list[list[int]]:
    """The four tokens that mark each class (below FIRST_BODY_TOKEN, so a body token never marks a class)."""
    tokens = [[10 + 7 * j + k for j in range(4)] for k in range(num_labels)]
    if max(max(t) for t in tokens) >= FIRST_BODY_TOKEN:
        raise ValueError(f"{num_labels} classes do not fit below token {FIRST_BODY_TOKEN}")
    return tokens


def synthetic_data(
    n: int, vocab: int, seed: int, num_labels: int = 7, max_length: int = 512
) -> tuple[list[list[int]], list[int]]:
    """`n` samples (token ids, label): a fixed `seed` gives the same data on every machine."""
    rng = random.Random(seed)
    signal = class_tokens(num_labels)
    ids, labels = [], []
    for _ in range(n):
        length = int(min(max_length, max(8, round(rng.lognormvariate(math.log(49), 0.81)))))
        label = rng.randrange(num_labels)
        body = [rng.randrange(FIRST_BODY_TOKEN, vocab) for _ in range(length - 2)]
        for _ in range(3):
            body[rng.randrange(len(body))] = rng.choice(signal[label])
        ids.append([BOS] + body + [EOS])
        labels.append(label)
    return ids, labels


def fingerprint(ids: list[list[int]], labels: list[int]) -> str:
    """sha256 of the data (what `dataset.sha256` records: the same seed and sizes give the same hash)."""
    digest = hashlib.sha256()
    for row, label in zip(ids, labels):
        digest.update(f"{label}:{','.join(map(str, row))}\n".encode())
    return digest.hexdigest()
