"""Labelled text data: JSONL/CSV loading with line-precise errors, label map, stratified split, content hash."""

from __future__ import annotations

import csv
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import DataError

DEFAULT_DATASET = Path(__file__).parent / "emotions.jsonl"
CHARS_PER_TOKEN_LIMIT = 16  # texts are cut at 16 characters per token of max_length as they are read
DEFAULT_MAX_CHARS = 512 * CHARS_PER_TOKEN_LIMIT


@dataclass(frozen=True)
class Example:
    text: str
    label: str
    line: int
    truncated: bool = False  # the text was cut to the character limit when read


@dataclass(frozen=True)
class Dataset:
    path: str
    sha256: str
    labels: tuple[str, ...]
    train: tuple[Example, ...]
    eval: tuple[Example, ...]

    @property
    def truncated(self) -> int:
        """How many texts were cut to the character limit when read."""
        return sum(e.truncated for e in self.train + self.eval)

    def summary(self) -> dict:
        return {
            "path": self.path,
            "sha256": self.sha256,
            "n_train": len(self.train),
            "n_eval": len(self.eval),
            "labels": list(self.labels),
            "truncated_chars": self.truncated,
        }


def _decoded_lines(path: Path, handle, digest) -> Iterator[tuple[int, str]]:
    """(line number, text with its newline) of a binary file, one line in memory at a time; feeds `digest`."""
    for number, raw in enumerate(handle, start=1):
        digest.update(raw)
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(
                path, f"not valid UTF-8 (byte {e.start} of the line); save the file as UTF-8", line=number
            ) from None
        yield number, (line[1:] if number == 1 and line.startswith("\ufeff") else line)


def _read_jsonl(path: Path, lines, text_col: str, label_col: str, max_chars: int) -> Iterator[Example]:
    for number, line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(path, f"not valid JSON ({e.msg})", line=number) from None
        if not isinstance(record, dict):
            raise DataError(path, "each line must be a JSON object", line=number)
        yield _example(path, number, record, text_col, label_col, max_chars)


def _read_csv(path: Path, lines, text_col: str, label_col: str, max_chars: int) -> Iterator[Example]:
    numbers = []

    def text_lines():
        for number, line in lines:
            numbers.append(number)
            yield line

    csv.field_size_limit(2**31 - 1)  # long fields are cut below, after parsing
    reader = csv.DictReader(text_lines())
    header = reader.fieldnames or []
    missing = [c for c in (text_col, label_col) if c not in header]
    if missing:
        raise DataError(path, f"missing column(s) {missing} in the header (found {header})", line=1)
    line = 2
    for record in reader:
        if not all(v in (None, "") for v in record.values()):
            yield _example(path, line, record, text_col, label_col, max_chars)
        line = numbers[-1] + 1
        numbers.clear()


def _example(path: Path, line: int, record: dict, text_col: str, label_col: str, max_chars: int) -> Example:
    missing = [c for c in (text_col, label_col) if record.get(c) is None]
    if missing:
        raise DataError(path, f"missing column(s) {missing} (have {sorted(record)})", line=line)
    text, label = record[text_col], record[label_col]
    if not isinstance(text, str) or not text.strip():
        raise DataError(path, f"empty text in column {text_col!r}", line=line)
    label = str(label).strip()
    if not label:
        raise DataError(path, f"empty label in column {label_col!r}", line=line)
    text = text.strip()
    return Example(text=text[:max_chars], label=label, line=line, truncated=len(text) > max_chars)


def read_examples(
    path: str | Path, text_col: str = "text", label_col: str = "label", max_chars: int = DEFAULT_MAX_CHARS
) -> tuple[list[Example], str]:
    """All examples of a .jsonl/.json/.csv file (texts cut to `max_chars` as they are read: one line in
    memory at a time) and the sha256 of its bytes."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "no such file")
    if path.is_dir():
        raise DataError(path, "is a directory: pass a .jsonl or .csv file")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        reader = _read_jsonl
    elif suffix in (".csv", ".tsv"):
        reader = _read_csv
    else:
        raise DataError(path, f"unknown file type {suffix!r}: use .jsonl or .csv")
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            examples = list(reader(path, _decoded_lines(path, handle, digest), text_col, label_col, max_chars))
    except OSError as e:
        raise DataError(path, f"cannot read it ({e.strerror})") from None
    if not examples:
        raise DataError(path, "no examples in the file (it is empty or holds only blank lines)")
    return examples, digest.hexdigest()


def stratified_split(
    examples: list[Example], labels: tuple[str, ...], eval_fraction: float, seed: int
) -> tuple[list[Example], list[Example]]:
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


def load_dataset(
    path: str | Path | None = None,
    *,
    labels: tuple[str, ...] | None = None,
    eval_fraction: float = 0.2,
    seed: int = 42,
    text_col: str = "text",
    label_col: str = "label",
    max_chars: int = DEFAULT_MAX_CHARS,
) -> Dataset:
    """Load, validate and split a dataset. `labels=None` takes the sorted label set found in the file."""
    path = Path(path) if path else DEFAULT_DATASET
    examples, sha = read_examples(path, text_col, label_col, max_chars)
    if labels is not None:
        allowed = set(labels)
        for e in examples:
            if e.label not in allowed:
                raise DataError(
                    path,
                    f"unknown label {e.label!r}; expected one of {list(labels)} "
                    "(pass --labels auto to take the labels from the data)",
                    line=e.line,
                )
    else:
        labels = tuple(sorted({e.label for e in examples}))
    present = {e.label for e in examples}
    if len(present) < 2:
        raise DataError(
            path,
            f"only one label ({sorted(present)[0]!r}) in the file: classification needs at least two",
            line=examples[0].line,
        )
    for label in labels:
        group = [e for e in examples if e.label == label]
        if len(group) < 2:
            where = group[0].line if group else None
            raise DataError(
                path,
                f"too small to split: label {label!r} has {len(group)} example(s), "
                "need at least 2 (one for training, one for evaluation)",
                line=where,
            )
    train, evals = stratified_split(examples, labels, eval_fraction, seed)
    return Dataset(path=str(path), sha256=sha, labels=tuple(labels), train=tuple(train), eval=tuple(evals))
