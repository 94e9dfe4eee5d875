"""Dataset loading: every kind of bad file gets a DataError naming the file and line; split and hash are stable."""

import hashlib
import json
import subprocess
import sys

import pytest

from workload.data.dataset import DEFAULT_DATASET, load_dataset
from workload.errors import DataError
from workload.training.presets import EMOTIONS


def _jsonl(tmp_path, rows, name="d.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    return path


def _rows(n_per_label=3, labels=("joy", "anger")):
    return [{"text": f"text {label} {i}", "label": label} for label in labels for i in range(n_per_label)]


def _error(path, **kwargs) -> str:
    with pytest.raises(DataError) as info:
        load_dataset(path, **kwargs)
    return str(info.value)


def test_bundled_sample_has_seven_classes_in_two_languages():
    data = load_dataset(labels=EMOTIONS)
    texts = [e.text for e in data.train + data.eval]
    assert set(e.label for e in data.train) == set(EMOTIONS) == set(e.label for e in data.eval)
    assert len(texts) >= 7 * 30
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in t) for t in texts)
    assert any(t.isascii() for t in texts)
    assert data.sha256 == hashlib.sha256(DEFAULT_DATASET.read_bytes()).hexdigest()


def test_split_is_stratified_and_deterministic_by_seed():
    a, b = load_dataset(seed=1), load_dataset(seed=1)
    c = load_dataset(seed=2)
    assert [e.line for e in a.eval] == [e.line for e in b.eval]
    assert [e.line for e in a.eval] != [e.line for e in c.eval]
    for label in a.labels:
        n_eval = sum(e.label == label for e in a.eval)
        n_all = n_eval + sum(e.label == label for e in a.train)
        assert n_eval == round(0.2 * n_all)
    assert not {e.line for e in a.eval} & {e.line for e in a.train}


def test_missing_column_names_file_and_line(tmp_path):
    rows = _rows()
    rows[2] = {"text": "no label here"}
    path = _jsonl(tmp_path, rows)
    message = _error(path, labels=None)
    assert f"{path}:3" in message and "label" in message


def test_unknown_label_names_line(tmp_path):
    rows = _rows(labels=("joy", "anger", "boredom"))
    path = _jsonl(tmp_path, rows)
    message = _error(path, labels=EMOTIONS)
    assert f"{path}:7" in message and "boredom" in message and "--labels auto" in message


def test_single_label_is_rejected(tmp_path):
    path = _jsonl(tmp_path, _rows(labels=("joy",)))
    message = _error(path, labels=None)
    assert str(path) in message and "only one label" in message


def test_empty_text_names_line(tmp_path):
    rows = _rows()
    rows[4]["text"] = "   "
    path = _jsonl(tmp_path, rows)
    assert f"{path}:5" in _error(path, labels=None)


def test_non_utf8_names_line(tmp_path):
    path = _jsonl(tmp_path, _rows())
    lines = path.read_bytes().split(b"\n")
    lines[1] = b'{"text": "caf\xe9", "label": "joy"}'
    path.write_bytes(b"\n".join(lines))
    message = _error(path, labels=None)
    assert f"{path}:2" in message and "UTF-8" in message


def test_too_small_to_split(tmp_path):
    rows = _rows(n_per_label=3) + [{"text": "a lone fear", "label": "fear"}]
    path = _jsonl(tmp_path, rows)
    message = _error(path, labels=None)
    assert f"{path}:7" in message and "too small to split" in message and "'fear'" in message


def test_invalid_json_line(tmp_path):
    path = _jsonl(tmp_path, _rows())
    path.write_text(path.read_text() + "{not json\n")
    assert f"{path}:7" in _error(path, labels=None)


def test_csv_reads_and_reports_lines(tmp_path):
    good = tmp_path / "d.csv"
    good.write_text("text,label\n" + "".join(f'"hello, {i}",joy\nugh {i},anger\n' for i in range(3)), encoding="utf-8")
    data = load_dataset(good, labels=None)
    assert data.labels == ("anger", "joy") and len(data.train) + len(data.eval) == 6
    assert any(e.text == "hello, 0" for e in data.train + data.eval)
    bad_header = tmp_path / "h.csv"
    bad_header.write_text("sentence,label\nx,joy\n")
    assert f"{bad_header}:1" in _error(bad_header, labels=None)
    empty = tmp_path / "e.csv"
    empty.write_text("text,label\na,joy\nb,joy\n,anger\nc,anger\n")
    assert f"{empty}:4" in _error(empty, labels=None)


def test_cli_refuses_bad_data_with_exit_2_and_writes_no_result(tmp_path):
    path = _jsonl(tmp_path, _rows(labels=("joy",)))
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "workload",
            "train",
            "--preset",
            "smoke",
            "--data",
            str(path),
            "--labels",
            "auto",
            "--out",
            str(out),
            "--no-probes",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert not out.exists()  # bad data says nothing about the environment: no result
    assert f"bad input: {path}:1: only one label" in proc.stderr
