"""The pass bar of a train run: the eval accuracy it must reach to show that it learned (docs/matrix.md).

A model that always answers the eval split's most common label scores its majority rate (at least chance,
1/k for k labels) without learning anything. The bar beats that baseline by MARGIN of the way from it to a
perfect score: bar = base + MARGIN * (1 - base), base = max(majority rate, 1/k). So 7 balanced labels need
0.314, 2 balanced labels 0.600, and a 90 % majority 0.920. A preset may set a higher floor (smoke: 0.45);
`--min-accuracy X` replaces the bar (the run then is not the preset's verdict configuration)."""

from __future__ import annotations

from collections import Counter

MARGIN = 0.2


def pass_bar(eval_labels: list[int], num_labels: int, *, floor: float = 0.0, given: float | None = None) -> dict:
    """{"min_accuracy", "majority_rate", "chance", "margin", "source"} for this eval split."""
    counts = Counter(eval_labels)
    majority = max(counts.values()) / len(eval_labels) if eval_labels else 1.0
    chance = 1 / num_labels
    base = max(majority, chance)
    rule = base + MARGIN * (1 - base)
    if given is not None:
        bar, source = given, "--min-accuracy"
    elif floor > rule:
        bar, source = floor, "preset floor"
    else:
        bar, source = rule, "majority rate + margin"
    return {
        "min_accuracy": round(bar, 4),
        "majority_rate": round(majority, 4),
        "chance": round(chance, 4),
        "margin": MARGIN,
        "source": source,
    }
