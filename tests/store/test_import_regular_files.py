"""The import opens regular files only and reads at most the size limit: a result.json that
is a symlink to /dev/zero, a FIFO, or larger than the limit is reported and skipped, never read to exhaustion.
The CLI runs in a subprocess with a timeout, so a hang fails the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from builder import strict_json
from matrix_fixtures import make_result

ENVBUILD = [sys.executable, "-c", "from builder.cli import main; main()"]


def envbuild(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run([*ENVBUILD, *map(str, args)], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize(
    "kind, words", [("zero", "a symbolic link"), ("fifo", "not a regular file"), ("link", "a symbolic link")]
)
def test_an_irregular_result_json_is_skipped_with_a_reason(tmp_path, kind, words):
    folder = tmp_path / "artifacts"
    (folder / "bad").mkdir(parents=True)
    (folder / "good").mkdir()
    (folder / "good" / "result.json").write_text(json.dumps(make_result()))
    bad = folder / "bad" / "result.json"
    if kind == "zero":
        bad.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(bad)
    else:
        bad.symlink_to(folder / "good" / "result.json")
    refused = envbuild("matrix", "import", "--db", tmp_path / "m.db", folder)
    assert refused.returncode == 2 and words in refused.stderr and not (tmp_path / "m.db").exists(), refused.stderr
    skipped = envbuild("matrix", "import", "--db", tmp_path / "m.db", folder, "--skip-invalid")
    assert skipped.returncode == 0 and "imported 1 new run(s)" in skipped.stdout and words in skipped.stderr


def test_reads_stop_at_the_limit(tmp_path):
    big = tmp_path / "result.json"
    big.write_bytes(b" " * 1001)
    with pytest.raises(strict_json.StrictJSONError, match="larger than 1000 bytes"):
        strict_json.read_regular(big, 1000)
    assert strict_json.read_regular(big, 1001) == b" " * 1001
