"""Labelled text data: JSONL/CSV loading with line-precise errors, label map, stratified split, content hash."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import random
from dataclasses import dataclass
from pathlib import Path

from .errors import DataError

DEFAULT_DATASET = Path(__file__).parent / "data" / "emotions.jsonl"


@dataclass(frozen=True)
class Example:
    text: str
    label: str
    line: int


@dataclass(frozen=True)
class Dataset:
    path: str
    sha256: str
    labels: tuple[str, ...]
    train: tuple[Example, ...]
    eval: tuple[Example, ...]

    def label_id(self, name: str) -> int:
        return self.labels.index(name)

    def summary(self) -> dict:
        return {"path": self.path, "sha256": self.sha256, "n_train": len(self.train),
                "n_eval": len(self.eval), "labels": list(self.labels)}


def _decoded_lines(path: Path, raw: bytes) -> list[str]:
    lines = raw.split(b"\n")
    out = []
    for number, line in enumerate(lines, start=1):
        try:
            out.append(line.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise DataError(path, f"not valid UTF-8 (byte {e.start} of the line); save the file as UTF-8",
                            line=number) from None
    if out and out[0].startswith("\ufeff"):
        out[0] = out[0][1:]
    return out


def _read_jsonl(path: Path, lines: list[str], text_col: str, label_col: str) -> list[Example]:
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(path, f"not valid JSON ({e.msg})", line=number) from None
        if not isinstance(record, dict):
            raise DataError(path, "each line must be a JSON object", line=number)
        rows.append((number, record))
    return [_example(path, number, rec, text_col, label_col) for number, rec in rows]


def _read_csv(path: Path, lines: list[str], text_col: str, label_col: str) -> list[Example]:
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    header = reader.fieldnames or []
    missing = [c for c in (text_col, label_col) if c not in header]
    if missing:
        raise DataError(path, f"missing column(s) {missing} in the header (found {header})", line=1)
    examples, start = [], 2
    for record in reader:
        line = start
        start = reader.line_num + 1
        if all(v in (None, "") for v in record.values()):
            continue
        examples.append(_example(path, line, record, text_col, label_col))
    return examples


def _example(path: Path, line: int, record: dict, text_col: str, label_col: str) -> Example:
    missing = [c for c in (text_col, label_col) if record.get(c) is None]
    if missing:
        raise DataError(path, f"missing column(s) {missing} (have {sorted(record)})", line=line)
    text, label = record[text_col], record[label_col]
    if not isinstance(text, str) or not text.strip():
        raise DataError(path, f"empty text in column {text_col!r}", line=line)
    label = str(label).strip()
    if not label:
        raise DataError(path, f"empty label in column {label_col!r}", line=line)
    return Example(text=text.strip(), label=label, line=line)


def read_examples(path: str | Path, text_col: str = "text", label_col: str = "label") -> tuple[list[Example], str]:
    """All examples of a .jsonl/.json/.csv file and the sha256 of its bytes."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "no such file")
    raw = path.read_bytes()
    lines = _decoded_lines(path, raw)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        examples = _read_jsonl(path, lines, text_col, label_col)
    elif suffix in (".csv", ".tsv"):
        examples = _read_csv(path, lines, text_col, label_col)
    else:
        raise DataError(path, f"unknown file type {suffix!r}: use .jsonl or .csv")
    if not examples:
        raise DataError(path, "no examples in the file")
    return examples, hashlib.sha256(raw).hexdigest()


def stratified_split(examples: list[Example], labels: tuple[str, ...], eval_fraction: float,
                     seed: int) -> tuple[list[Example], list[Example]]:
    """Per label: shuffle with `seed`, put round(n*fraction) (at least 1, at most n-1) into eval."""
    rng = random.Random(seed)
    train, evals = [], []
    for label in labels:
        group = [e for e in examples if e.label == label]
        rng.shuffle(group)
        n_eval = min(len(group) - 1, max(1, round(len(group) * eval_fraction)))
        evals += group[:n_eval]
        train += group[n_eval:]
    rng.shuffle(train)
    evals.sort(key=lambda e: e.line)
    return train, evals


def load_dataset(path: str | Path | None = None, *, labels: tuple[str, ...] | None = None,
                 eval_fraction: float = 0.2, seed: int = 42, text_col: str = "text",
                 label_col: str = "label") -> Dataset:
    """Load, validate and split a dataset. `labels=None` takes the sorted label set found in the file."""
    path = Path(path) if path else DEFAULT_DATASET
    examples, sha = read_examples(path, text_col, label_col)
    if labels is not None:
        allowed = set(labels)
        for e in examples:
            if e.label not in allowed:
                raise DataError(path, f"unknown label {e.label!r}; expected one of {list(labels)} "
                                      "(pass --labels auto to take the labels from the data)", line=e.line)
    else:
        labels = tuple(sorted({e.label for e in examples}))
    present = {e.label for e in examples}
    if len(present) < 2:
        raise DataError(path, f"only one label ({sorted(present)[0]!r}) in the file: classification needs "
                              "at least two", line=examples[0].line)
    for label in labels:
        group = [e for e in examples if e.label == label]
        if len(group) < 2:
            where = group[0].line if group else None
            raise DataError(path, f"too small to split: label {label!r} has {len(group)} example(s), "
                                  "need at least 2 (one for training, one for evaluation)", line=where)
    train, evals = stratified_split(examples, labels, eval_fraction, seed)
    return Dataset(path=str(path), sha256=sha, labels=tuple(labels), train=tuple(train), eval=tuple(evals))
