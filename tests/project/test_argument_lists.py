"""A long positional argument list becomes a small record (a frozen dataclass such as
workload.training.loop.StepContext or workload.runner.TrainRun): no function in builder/ or workload/ takes more than
MAX_POSITIONAL parameters that can be passed by position. click command callbacks are left out (click passes every
option by name, as its decorator declares it); what is still over the cap is named in ALLOWED with why."""

from __future__ import annotations

import ast
from pathlib import Path

from repo import REPO_ROOT

MAX_POSITIONAL = 8
ALLOWED = {
    "workload/training/varlen.py:varlen_attention": "transformers' attention interface calls it with this signature",
    "builder/engine/container.py:stream_container": "the Docker run route's streaming, rewritten with the runner interface",
    "builder/cli/request_options.py:request_from_options": "called with the verbs' cell flags by name (**options)",
    "builder/report/ladder.py:ladder": "one cell's evidence rows, read by the report site",
}


def _positional(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = [*function.args.posonlyargs, *function.args.args]
    return len(args) - (1 if args and args[0].arg in ("self", "cls") else 0)


def _click_command(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated `@<group>.command(...)` or `@click.command(...)` (a `group` is a command too)."""
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr in ("command", "group"):
            return True
    return False


def over_the_cap(paths, root: Path) -> dict[str, int]:
    """'file:function' -> positional parameter count, for each function in `paths` over MAX_POSITIONAL."""
    found = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _click_command(node):
                if _positional(node) > MAX_POSITIONAL:
                    found[f"{path.relative_to(root).as_posix()}:{node.name}"] = _positional(node)
    return found


def test_no_function_takes_a_long_positional_list():
    paths = sorted([*(REPO_ROOT / "builder").rglob("*.py"), *(REPO_ROOT / "workload").rglob("*.py")])
    found = over_the_cap(paths, REPO_ROOT)
    unlisted = {name: count for name, count in found.items() if name not in ALLOWED}
    assert not unlisted, f"pass a small record (a frozen dataclass) instead of more than {MAX_POSITIONAL}: {unlisted}"
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"no longer over the cap: take these out of ALLOWED: {stale}"


def test_the_scan_counts_positional_parameters_not_keyword_only_ones_or_click_options(tmp_path):
    (tmp_path / "m.py").write_text(
        "def long(a, b, c, d, e, f, g, h, i):\n    pass\n"
        "def keywords(a, b, c, d, e, f, g, h, *, i):\n    pass\n"
        "class C:\n    def method(self, a, b, c, d, e, f, g, h):\n        pass\n"
        "@main.command('x')\ndef verb(a, b, c, d, e, f, g, h, i):\n    pass\n"
    )
    assert over_the_cap([tmp_path / "m.py"], tmp_path) == {"m.py:long": 9}
