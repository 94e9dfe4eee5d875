"""The run routes' shape, read from the source: a RunEnd is constructed in one place (run_result.run_end), and the
run routes and the modules they use print nothing and know no console: what they tell goes to a `notify` callback
(builder.engine.runner), which the CLI renders."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROUTE_MODULES = [
    f"builder/engine/{name}.py"
    for name in (
        "runner",
        "routes",
        "container",
        "local_run",
        "managed_run",
        "apptainer",
        "foreign",
        "foreign_docker",
        "foreign_sif",
        "run_output",
        "venv_route",
        "workload_env",
        "accelerator",
        "conditions",
        "run_result",
    )
] + ["builder/workflows/run.py", "builder/workflows/run_result.py", "builder/workflows/run_identity.py"]


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def run_end_calls(root: Path) -> list[tuple[str, str]]:
    """(module path, enclosing function) of every call of RunEnd(...) under builder/ and workload/."""
    found = []
    for path in sorted([*root.glob("builder/**/*.py"), *root.glob("workload/**/*.py")]):
        tree = _tree(path)
        for function in [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]:
            for node in ast.walk(function):
                if not isinstance(node, ast.Call):
                    continue
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if name == "RunEnd":
                    found.append((str(path.relative_to(root)), getattr(function, "name", "<module>")))
    # a call inside a function is also seen from the module and from enclosing functions: keep the innermost
    innermost = {}
    for module, function in found:
        innermost.setdefault(module, set()).add(function)
    return sorted((m, f) for m, fs in innermost.items() for f in fs if f != "<module>" or fs == {"<module>"})


def test_a_run_end_is_constructed_in_one_place():
    assert run_end_calls(ROOT) == [("builder/engine/run_result.py", "run_end")]


def test_the_check_sees_a_second_constructor(tmp_path):
    for folder in ("builder/engine", "workload"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "builder/engine/run_result.py").write_text((ROOT / "builder/engine/run_result.py").read_text())
    (tmp_path / "builder/engine/local_run.py").write_text(
        "from builder.engine.run_result import RunEnd\n\ndef run():\n    return RunEnd('out', None, '', 0, 0, {}, {}, None)\n"
    )
    assert ("builder/engine/local_run.py", "run") in run_end_calls(tmp_path)


def printing(tree: ast.Module) -> list[str]:
    """What in `tree` reaches a terminal itself: rich imported, print(), a console's or a stream's write or print,
    sys.stdout / sys.stderr, a parameter named console."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] in ("rich", "click")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("rich", "click"):
            found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            found.append(f"print() on line {node.lineno}")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in ("stdout", "stderr")
            and getattr(node.value, "id", "") == "sys"
        ):
            found.append(f"sys.{node.attr} on line {node.lineno}")
        elif isinstance(node, ast.Attribute) and node.attr == "print":
            found.append(f".print on line {node.lineno}")
        elif isinstance(node, ast.arg) and node.arg == "console":
            found.append(f"a console parameter on line {node.lineno}")
    return found


@pytest.mark.parametrize("module", ROUTE_MODULES)
def test_a_run_route_prints_nothing_itself(module):
    assert printing(_tree(ROOT / module)) == []


def test_the_check_sees_a_route_that_prints():
    source = (ROOT / "builder/engine/local_run.py").read_text()
    printed = source.replace("notify(Output(line, here=True))", "sys.stdout.write(line)")
    assert printed != source
    assert printing(ast.parse(printed))
    console = source.replace("def run_local(request: RunRequest, notify: Notify,", "def run_local(request, console,")
    assert console != source
    assert printing(ast.parse(console))
