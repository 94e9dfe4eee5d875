"""`.ci/mutation.sh` (docs/mutation.md): its configuration names real modules and test files, and a Python
without cosmic-ray or an unknown module is a clear exit 2 that runs and writes nothing."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from repo import REPO_ROOT

SCRIPT = REPO_ROOT / ".ci" / "mutation.py"


def _run(*args: str, python: tuple[str, ...] = (sys.executable,), out=None, timeout=60) -> subprocess.CompletedProcess:
    env = {**os.environ, "MUTATION_OUT": str(out)} if out else None
    return subprocess.run([*python, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_every_configured_module_and_test_file_exists_and_is_listed():
    modules = tomllib.loads((REPO_ROOT / ".ci" / "mutation.toml").read_text())["modules"]
    listed = _run("--list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == list(modules)
    for (name, module), line in zip(modules.items(), lines):
        assert (REPO_ROOT / module["path"]).is_file(), name
        for test in module["tests"]:
            assert (REPO_ROOT / test).is_file(), (name, test)
            assert test in line


def test_a_python_without_cosmic_ray_is_told_how_to_get_it_and_nothing_runs(tmp_path):
    # -S: no site-packages, so no cosmic-ray (the standard library, which the script needs, stays)
    result = _run("provenance", python=(sys.executable, "-S"), out=tmp_path / "out")
    assert result.returncode == 2
    assert "has no cosmic-ray" in result.stderr and "MUTATION_PYTHON" in result.stderr
    assert "baseline" not in result.stdout and not (tmp_path / "out").exists()


def test_an_unknown_module_is_refused_with_the_choices(tmp_path):
    result = _run("provenence", out=tmp_path / "out")
    assert result.returncode == 2 and "unknown module(s) provenence" in result.stderr
    assert "provenance" in result.stderr.split("pick from", 1)[1]
    assert not (tmp_path / "out").exists()


def _script_module():
    spec = importlib.util.spec_from_file_location("envbuild_mutation_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SAMPLE = '''from __future__ import annotations


def f(a: int | None, *rest: str | bytes, b: float = 1 | 2, **kw: int | None) -> list[int] | None:
    """é: a non-ASCII docstring line, so byte and character columns differ below."""
    local: int | None = a or 3
    return [a - 1] if local else None


class Row:
    width: int | None = None  # a class body's annotation: pydantic and dataclasses read these

    def g(self, éééééééééé: int | None) -> int | None:  # ten 2-byte letters before the annotation
        return éééééééééé
'''


def _sample_session(tmp_path: Path) -> tuple[Path, list[tuple]]:
    """A real cosmic-ray session over SAMPLE; returns it and its mutants as (job, row, col, end_row, end_col)."""
    (tmp_path / "sample.py").write_text(SAMPLE, encoding="utf-8")
    (tmp_path / "cr.toml").write_text(
        '[cosmic-ray]\nmodule-path = "sample.py"\ntimeout = 10.0\n'
        'excluded-modules = []\ntest-command = "true"\n'
        '[cosmic-ray.distributor]\nname = "local"\n'
    )
    subprocess.run(
        [sys.executable, "-m", "cosmic_ray.cli", "init", "cr.toml", "s.sqlite"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    with sqlite3.connect(tmp_path / "s.sqlite") as conn:
        mutants = conn.execute(
            "SELECT job_id, start_pos_row, start_pos_col, end_pos_row, end_pos_col FROM mutation_specs"
        ).fetchall()
    return tmp_path / "s.sqlite", mutants


def test_only_rewrites_inside_def_annotations_are_skipped_as_equivalent(tmp_path):
    script = _script_module()
    session, mutants = _sample_session(tmp_path)
    skipped_count = script._skip_annotations(session, SAMPLE)
    with sqlite3.connect(session) as conn:
        skipped = {job for (job,) in conn.execute("SELECT job_id FROM work_results WHERE worker_outcome = 'SKIPPED'")}
    lines = SAMPLE.splitlines()
    where = {job: lines[row - 1][col:end] if row == end_row else None for job, row, col, end_row, end in mutants}
    assert skipped_count == len(skipped) > 0
    # the `|` of `int | None` and friends on the def lines: skipped (cosmic-ray leaves `local: int | None` alone)
    annotation_rows = {4, 13}
    for job, row, col, _, _ in mutants:
        text = lines[row - 1]
        in_annotation = row in annotation_rows and where[job] == "|" and text[col - 2 : col + 3] != "1 | 2"
        assert (job in skipped) == in_annotation, (row, col, where[job], text)
    assert sum(1 for job, row, *_ in mutants if row == 13 and job in skipped) == 22  # both annotations of g
    # the default value `1 | 2`, `a - 1` and `a or 3` all run


def test_a_module_that_evaluates_annotations_skips_nothing():
    script = _script_module()
    assert script._annotation_spans(SAMPLE.replace("from __future__ import annotations\n", "")) == []
    assert script._annotation_spans(SAMPLE + "\nimport typing\nHINTS = typing.get_type_hints(f)\n") == []
    assert script._annotation_spans(SAMPLE.replace("class Row:", "@validate_call\nclass Row:")) == []
    assert script._annotation_spans(SAMPLE) != []


def test_shards_split_the_pending_mutants_and_merge_their_results_back(tmp_path):
    script = _script_module()
    session, mutants = _sample_session(tmp_path)
    done = mutants[0][0]
    with sqlite3.connect(session) as conn:
        conn.execute(
            "INSERT INTO work_results (worker_outcome, output, test_outcome, diff, job_id) "
            "VALUES ('NORMAL', '', 'KILLED', '', ?)",
            (done,),
        )
    shards = [tmp_path / "a.sqlite", tmp_path / "b.sqlite", tmp_path / "c.sqlite"]
    script._split(session, shards)
    held = []
    for shard in shards:
        with sqlite3.connect(shard) as conn:
            jobs = [j for (j,) in conn.execute("SELECT job_id FROM work_items")]
            assert {j for (j,) in conn.execute("SELECT job_id FROM mutation_specs")} == set(jobs)
            assert conn.execute("SELECT COUNT(*) FROM work_results").fetchone()[0] == 0
            conn.executemany(
                "INSERT INTO work_results (worker_outcome, output, test_outcome, diff, job_id) "
                "VALUES ('NORMAL', '', 'SURVIVED', '', ?)",
                [(j,) for j in jobs],
            )
        held += jobs
    pending = sorted(j for j, *_ in mutants if j != done)
    assert sorted(held) == pending and len(set(held)) == len(held)  # each pending mutant in exactly one shard
    assert max(map(len, (held[i::3] for i in range(3)))) - min(map(len, (held[i::3] for i in range(3)))) <= 1
    script._merge(session, shards)
    assert script._counts(session) == (len(mutants), len(mutants), len(pending))


def test_jobs_below_one_are_refused(tmp_path):
    result = _run("--jobs", "0", "provenance", out=tmp_path / "out")
    assert result.returncode == 2 and "--jobs takes a whole number from 1" in result.stderr
    assert not (tmp_path / "out").exists()


def test_lines_keep_only_the_mutants_starting_on_them(tmp_path):
    script = _script_module()
    session, mutants = _sample_session(tmp_path)
    rows = sorted({row for _, row, *_ in mutants})
    wanted = {rows[0], rows[-1]}
    assert script._keep_lines(session, wanted) == sum(1 for _, row, *_ in mutants if row in wanted)
    with sqlite3.connect(session) as conn:
        left = conn.execute("SELECT s.start_pos_row FROM work_items w JOIN mutation_specs s ON s.job_id = w.job_id")
        assert {row for (row,) in left} == wanted
        assert conn.execute("SELECT COUNT(*) FROM mutation_specs").fetchone()[0] == script._counts(session)[0]
    assert script._keep_lines(session, {10_000}) == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (("--lines", "3,x", "provenance"), "--lines takes line numbers from 1 separated by commas, not '3,x'"),
        (("--lines", "0", "provenance"), "--lines takes line numbers from 1"),
        (("--lines", "3", "provenance", "settings"), "--lines goes with exactly one module"),
        (("--lines", "3"), "--lines goes with exactly one module"),
    ],
)
def test_lines_are_numbers_for_one_module(tmp_path, args, message):
    result = _run(*args, out=tmp_path / "out")
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_the_gpu_retest_reads_each_survivor_of_a_summary_by_line():
    spec = importlib.util.spec_from_file_location("envbuild_gpu_retest", REPO_ROOT / ".ci" / "mutation_gpu_retest.py")
    retest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(retest)
    diff = "--- a/m.py\n+++ b/m.py\n@@ -1,1 +1,1 @@\n-x = 1\n+x = 2\n"
    summary = (
        f"m (m.py at abc): 3 mutants, 1 killed, 2 survived\n\nSURVIVED line 1: core/NumberReplacer #0\n"
        f"--- mutation diff ---\n{diff}\nSURVIVED line 7: core/AddNot #3\n--- mutation diff ---\n{diff}"
        "EQUIVALENT line 9: core/ReplaceBinaryOperator_BitOr_Add #0 (equivalent: ...)\n"
    )
    assert retest.survivors(summary, None) == [
        ("line 1: core/NumberReplacer #0", diff),
        ("line 7: core/AddNot #3", diff),
    ]
    assert retest.survivors(summary, {7}) == [("line 7: core/AddNot #3", diff)]


def test_lines_with_no_mutant_on_them_stop_after_the_baseline_and_write_nothing(tmp_path):
    """The whole path of `--lines` through a real run: line 1 of provenance.py is its docstring."""
    result = _run("--lines", "1", "provenance", out=tmp_path / "out", timeout=600)  # a baseline run of its tests
    assert result.returncode == 1, result.stderr
    assert "[provenance] no mutant starts on line(s) 1 of builder/store/provenance.py" in result.stderr
    assert "baseline" in result.stdout and not (tmp_path / "out").exists()
