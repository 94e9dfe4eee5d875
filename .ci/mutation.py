"""Mutation testing of the modules in .ci/mutation.toml with cosmic-ray (docs/mutation.md).

Each module is mutated in a throw-away copy of this tree (tracked and untracked, not ignored, files), never
in the tree itself: a run stopped half-way leaves nothing mutated behind. The module's tests run once
unmutated first (a red baseline would count every mutant as killed), then once per mutant; the progress
line says how many are done, how many survived and about how long is left. The session database, a
summary and every survivor's diff are written to $MUTATION_OUT (default .mutation/).

A rewrite inside a def's annotations, in a module with `from __future__ import annotations` that never asks
for them at run time (no `get_type_hints`, `validate_call`), is equivalent by construction: the annotation stays
a string nobody evaluates. Such mutants are marked skipped before the run and counted as equivalent (each listed
in the summary), not run. `--jobs N` runs N mutants at a time, each shard in its own copy of the tree.

    bash .ci/mutation.sh                 # every module
    bash .ci/mutation.sh settings slurm  # some
    bash .ci/mutation.sh --list          # the modules, their files and tests
    bash .ci/mutation.sh --retest settings  # only the survivors of the last run (new tests, same module)
    bash .ci/mutation.sh --resume settings  # go on with a run that was stopped (Ctrl-C keeps what was done)
    bash .ci/mutation.sh --jobs 2 resolve   # two mutants at a time (one per core)
    bash .ci/mutation.sh --lines 39,109 attest  # only the mutants on these lines (old survivors, by line)
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / ".ci" / "mutation.toml"


def _modules() -> dict[str, dict]:
    return tomllib.loads(CONFIG.read_text())["modules"]


def _test_command(module: dict) -> str:
    args = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *module["tests"]]
    if module.get("select"):
        args += ["-k", module["select"]]
    return shlex.join(args)


def _copy_tree(dest: Path) -> None:
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        src, dst = ROOT / name, dest / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree, not yet committed
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)


def _counts(session: Path) -> tuple[int, int, int]:
    """(mutants, done, survived) from cosmic-ray's session database."""
    with sqlite3.connect(f"file:{session}?mode=ro", uri=True, timeout=30) as conn:
        total = conn.execute("SELECT COUNT(*) FROM work_items").fetchone()[0]
        done = conn.execute("SELECT COUNT(*) FROM work_results").fetchone()[0]
        survived = conn.execute("SELECT COUNT(*) FROM work_results WHERE test_outcome = 'SURVIVED'").fetchone()[0]
    return total, done, survived


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _reuse_session(name: str, module: dict, out: Path, session: Path, mode: str) -> None:
    """The last run's session, to finish (resume) or with its survivors pending again (retest); refused where
    the module has changed since (its mutants would not be the same)."""
    old, digest = out / f"{name}.sqlite", out / f"{name}.sha256"
    if not old.exists() or not digest.exists():
        sys.exit(f"[{name}] --{mode}: no earlier run in {out}: run it without --{mode} first")
    if digest.read_text().strip() != _digest(ROOT / module["path"]):
        sys.exit(f"[{name}] --{mode}: {module['path']} changed since the last run: run it without --{mode}")
    shutil.copy2(old, session)
    if mode == "retest":
        with sqlite3.connect(session) as conn:
            conn.execute("DELETE FROM work_results WHERE test_outcome = 'SURVIVED'")


def _annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """((row, col), (row, col)) of every annotation of a def's parameters and return value (the only annotations
    cosmic-ray mutates), as cosmic-ray counts positions (rows from 1, columns in characters); [] where the module
    evaluates annotations (no `from __future__ import annotations`, or it asks for them at run time)."""
    tree = ast.parse(source)
    future = any(
        isinstance(n, ast.ImportFrom) and n.module == "__future__" and any(a.name == "annotations" for a in n.names)
        for n in tree.body
    )
    if not future or any(
        word in source
        for word in ("get_type_hints", "validate_call", "__annotations__", "get_annotations", "inspect.signature")
    ):
        return []
    lines = source.splitlines()

    def column(row: int, offset: int) -> int:  # ast counts UTF-8 bytes, cosmic-ray characters
        return len(lines[row - 1].encode()[:offset].decode(errors="ignore"))

    def span(node: ast.expr) -> tuple[tuple[int, int], tuple[int, int]]:
        return (
            (node.lineno, column(node.lineno, node.col_offset)),
            (node.end_lineno, column(node.end_lineno, node.end_col_offset)),
        )

    spans = []
    for func in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        args = func.args
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if arg is not None and arg.annotation is not None:
                spans.append(span(arg.annotation))
        if func.returns is not None:
            spans.append(span(func.returns))
    return spans


def _skip_annotations(session: Path, source: str) -> int:
    """Mark the session's mutants that lie wholly inside an annotation span as skipped; returns how many."""
    spans = _annotation_spans(source)
    with sqlite3.connect(session) as conn:
        rows = conn.execute(
            "SELECT job_id, start_pos_row, start_pos_col, end_pos_row, end_pos_col FROM mutation_specs "
            "WHERE job_id NOT IN (SELECT job_id FROM work_results)"
        ).fetchall()
        skipped = [job for job, *pos in rows if any(a <= (pos[0], pos[1]) and (pos[2], pos[3]) <= b for a, b in spans)]
        conn.executemany(
            "INSERT INTO work_results (worker_outcome, output, test_outcome, diff, job_id) "
            f"VALUES ('SKIPPED', '{ANNOTATION_NOTE}', NULL, NULL, ?)",
            [(j,) for j in skipped],
        )
    return len(skipped)


#: The output stored with a mutant skipped by `_skip_annotations` (the summary counts it as equivalent).
ANNOTATION_NOTE = "equivalent: inside an annotation that is never evaluated (from __future__ import annotations)"


def _keep_lines(session: Path, lines: set[int]) -> int:
    """Drop every mutant that does not start on one of `lines` (an earlier run's survivors, named by line, tested
    again where that run's session is gone); returns how many are left."""
    with sqlite3.connect(session) as conn:
        gone = [
            (job,) for job, row in conn.execute("SELECT job_id, start_pos_row FROM mutation_specs") if row not in lines
        ]
        for table in ("work_results", "mutation_specs", "work_items"):
            conn.executemany(f"DELETE FROM {table} WHERE job_id = ?", gone)
        return conn.execute("SELECT COUNT(*) FROM work_items").fetchone()[0]


def _split(session: Path, shards: list[Path]) -> None:
    """Copy the session once per shard, each holding only its share of the mutants not yet run."""
    with sqlite3.connect(session) as conn:
        pending = [
            r[0]
            for r in conn.execute(
                "SELECT job_id FROM work_items WHERE job_id NOT IN (SELECT job_id FROM work_results) ORDER BY job_id"
            )
        ]
    for index, shard in enumerate(shards):
        shutil.copy2(session, shard)
        mine = pending[index :: len(shards)]
        with sqlite3.connect(shard) as conn:
            conn.execute("CREATE TEMP TABLE mine (job_id TEXT PRIMARY KEY)")
            conn.executemany("INSERT INTO mine VALUES (?)", [(j,) for j in mine])
            for table in ("work_results", "mutation_specs", "work_items"):
                conn.execute(f"DELETE FROM {table} WHERE job_id NOT IN (SELECT job_id FROM mine)")


def _merge(session: Path, shards: list[Path]) -> None:
    """Every shard's results back into the session."""
    with sqlite3.connect(session) as conn:
        for shard in shards:
            if shard.exists():
                conn.execute("ATTACH DATABASE ? AS shard", (str(shard),))
                conn.execute(
                    "INSERT OR REPLACE INTO work_results (worker_outcome, output, test_outcome, diff, job_id) "
                    "SELECT worker_outcome, output, test_outcome, diff, job_id FROM shard.work_results"
                )
                conn.commit()
                conn.execute("DETACH DATABASE shard")


def _run_module(
    name: str, module: dict, out: Path, mode: str | None = None, jobs: int = 1, lines: set[int] | None = None
) -> dict:
    cosmic = [sys.executable, "-m", "cosmic_ray.cli"]
    with tempfile.TemporaryDirectory(prefix=f"envbuild-mutation-{name}-") as tmp:
        trees = [Path(tmp) / f"tree{i}" for i in range(jobs)]
        for tree in trees:
            _copy_tree(tree)
        tree = trees[0]
        digest = _digest(tree / module["path"])
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
        command = _test_command(module)
        print(f"[{name}] {module['path']}: baseline: {command}", flush=True)
        start = time.monotonic()
        baseline = subprocess.run(shlex.split(command), cwd=tree, env=env, capture_output=True, text=True)
        if baseline.returncode != 0:
            sys.exit(f"[{name}] the tests fail without any mutant (fix them first):\n{baseline.stdout[-3000:]}")
        per_run = time.monotonic() - start
        config = (
            "[cosmic-ray]\n"
            f"module-path = {module['path']!r}\n"
            f"timeout = {float(module.get('timeout', 300))}\n"
            "excluded-modules = []\n"
            f"test-command = {command!r}\n"
            '[cosmic-ray.distributor]\nname = "local"\n'
        )
        for each in trees:
            (each / "cosmic-ray.toml").write_text(config)
        session = tree / "session.sqlite"
        if mode:
            _reuse_session(name, module, out, session, mode)
        else:
            subprocess.run([*cosmic, "init", "cosmic-ray.toml", str(session)], cwd=tree, env=env, check=True)
        if lines and not _keep_lines(session, lines):
            sys.exit(f"[{name}] no mutant starts on line(s) {_line_list(lines)} of {module['path']}")
        skipped = _skip_annotations(session, (tree / module["path"]).read_text(encoding="utf-8"))
        total, first, _ = _counts(session)
        print(
            f"[{name}] {total} mutants ({total - first} to run, {skipped} skipped now as annotations); the "
            f"unmutated tests took {per_run:.0f} s, so at most about {_clock((total - first) * per_run / jobs)} "
            f"with {jobs} job(s) (a killed mutant stops at its first failing test)",
            flush=True,
        )
        shards = [each / "shard.sqlite" for each in trees]
        _split(session, shards)
        procs = [
            subprocess.Popen(
                [*cosmic, "exec", "cosmic-ray.toml", str(shard)],
                cwd=each,
                env={**env, "PYTHONPATH": str(each)},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            for each, shard in zip(trees, shards)
        ]
        start, shown = time.monotonic(), None
        try:
            while any(proc.poll() is None for proc in procs):
                time.sleep(3)
                done, survived = _progress(session, shards)
                if (done, survived) != shown:
                    shown = (done, survived)
                    elapsed = time.monotonic() - start
                    left = f", about {_clock(elapsed / (done - first) * (total - done))} left" if done > first else ""
                    print(
                        f"[{name}] {done}/{total} mutants run, {survived} survived, {_clock(elapsed)}{left}", flush=True
                    )
        except BaseException:  # Ctrl-C or SIGTERM: stop the mutants' tests, keep what was done, drop the copies
            for proc in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
            _merge(session, shards)
            _summary(name, module, session, out, time.monotonic() - start, digest, lines)
            print(f"[{name}] stopped; `bash .ci/mutation.sh --resume {name}` goes on from here", flush=True)
            raise
        _merge(session, shards)
        failed = [proc for proc in procs if proc.returncode != 0]
        if failed:
            sys.exit(f"[{name}] cosmic-ray exec failed ({failed[0].returncode}): {failed[0].stderr.read()[-3000:]}")
        return _summary(name, module, session, out, time.monotonic() - start, digest, lines)


def _progress(session: Path, shards: list[Path]) -> tuple[int, int]:
    """(mutants done, survived) over the session and its shards while they run."""
    _, done, survived = _counts(session)
    for shard in shards:
        _, shard_done, shard_survived = _counts(shard)
        done, survived = done + shard_done, survived + shard_survived
    return done, survived


def _commit() -> str:
    """The tree's commit, `+changes` when its tracked files differ from it (what the run mutated and tested)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT).returncode != 0
    return (head.strip() or "?") + ("+changes" if dirty else "")


def _line_list(lines: set[int]) -> str:
    return ",".join(map(str, sorted(lines)))


def _summary(
    name: str, module: dict, session: Path, out: Path, seconds: float, digest: str, only_lines: set[int] | None = None
) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy2(session, out / f"{name}.sqlite")
    (out / f"{name}.sha256").write_text(digest + "\n")
    with sqlite3.connect(session) as conn:
        rows = conn.execute(
            "SELECT s.operator_name, s.occurrence, s.start_pos_row, r.test_outcome, r.worker_outcome, r.diff "
            "FROM work_results r JOIN mutation_specs s ON s.job_id = r.job_id "
            "ORDER BY s.start_pos_row, s.operator_name, s.occurrence"
        ).fetchall()
    survivors = [r for r in rows if r[3] == "SURVIVED"]
    annotations = [r for r in rows if r[4] == "SKIPPED"]
    total = _counts(session)[0]
    killed = sum(1 for r in rows if r[3] == "KILLED")
    incompetent = len(rows) - killed - len(survivors) - len(annotations)
    stopped = f" (stopped: {len(rows)} of {total} run)" if len(rows) < total else ""
    scope = f" (only the mutants on lines {_line_list(only_lines)})" if only_lines else ""
    lines = [
        f"{name} ({module['path']} at {_commit()}){scope}{stopped}: {len(rows)} mutants, {killed} killed, "
        f"{len(survivors)} survived, "
        f"{len(annotations)} equivalent as annotations (not run), {incompetent} incompetent (the mutant does "
        f"not import), {_clock(seconds)}"
    ]
    for operator, occurrence, row, _, _, diff in survivors:
        lines += ["", f"SURVIVED line {row}: {operator} #{occurrence}", diff or ""]
    for operator, occurrence, row, *_ in annotations:
        lines += [f"EQUIVALENT line {row}: {operator} #{occurrence} ({ANNOTATION_NOTE})"]
    (out / f"{name}.txt").write_text("\n".join(lines) + "\n")
    print(lines[0] + f"; survivors' diffs: {out / (name + '.txt')}", flush=True)
    return {
        "name": name,
        "mutants": len(rows),
        "killed": killed,
        "survived": len(survivors),
        "annotations": len(annotations),
    }


def main() -> None:
    modules = _modules()
    parser = argparse.ArgumentParser(
        prog="bash .ci/mutation.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("module", nargs="*", help=f"[default: all] {', '.join(modules)}")
    parser.add_argument("--list", action="store_true", help="print the modules and their tests, run nothing")
    again = parser.add_mutually_exclusive_group()
    again.add_argument(
        "--retest",
        action="store_const",
        dest="mode",
        const="retest",
        help="run only the last run's survivors again (after adding tests); the module's file must be unchanged",
    )
    again.add_argument(
        "--resume",
        action="store_const",
        dest="mode",
        const="resume",
        help="go on with the last run where it was stopped",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="mutants run at a time, each in its own copy of the tree [default: 1]",
    )
    parser.add_argument(
        "--lines",
        metavar="N,N,...",
        help="only the mutants starting on these lines of one module's file (an earlier run's "
        "survivors, by line, where its session is gone)",
    )
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error("--jobs takes a whole number from 1")
    lines = None
    if args.lines is not None:
        if not all(part.isdigit() and int(part) > 0 for part in args.lines.split(",")):
            parser.error(f"--lines takes line numbers from 1 separated by commas, not {args.lines!r}")
        if len(args.module) != 1:
            parser.error("--lines goes with exactly one module (line numbers belong to one file)")
        lines = {int(part) for part in args.lines.split(",")}
    unknown = [m for m in args.module if m not in modules]
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}: pick from {', '.join(modules)}")
    chosen = args.module or list(modules)
    if args.list:
        for name in chosen:
            print(f"{name}: {modules[name]['path']}: {_test_command(modules[name])}")
        return
    if importlib.util.find_spec("cosmic_ray") is None:
        print(
            f"{sys.executable} has no cosmic-ray: install the dev environment (bash .ci/dev_env.sh, then "
            "MUTATION_PYTHON=.venv/bin/python), or point MUTATION_PYTHON at a Python with the `test` extra",
            file=sys.stderr,
        )
        sys.exit(2)
    out = Path(os.environ.get("MUTATION_OUT", ROOT / ".mutation"))
    results = [_run_module(name, modules[name], out, args.mode, args.jobs, lines) for name in chosen]
    for r in results:
        print(
            f"{r['name']}: {r['killed']}/{r['mutants']} killed, {r['survived']} survived, "
            f"{r['annotations']} equivalent as annotations"
        )


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
