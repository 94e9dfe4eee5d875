"""result.json has one owner: its envelope is built by one constructor (workload/result.py `envelope`), which the
workload and `envbuild run`'s error envelope both call, and its file name is one name (`RESULT_FILE`).

The envelope is recognised by the keys the result schema requires (builder/store/result_schema.py): a dict literal
or `dict(...)` call naming all of them builds an envelope."""

from __future__ import annotations

import ast
from pathlib import Path

from repo import REPO_ROOT

OWNER = ("workload/result.py", "envelope")
SOURCES = ("builder", "workload", "images", "bench", ".ci")


def _required_keys() -> set[str]:
    from builder.store.result_schema import Result

    return {name for name, field in Result.model_fields.items() if field.is_required()}


def _keys(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Dict):
        return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        return {keyword.arg for keyword in node.keywords if keyword.arg}
    return set()


def _sources():
    for folder in SOURCES:
        yield from sorted((REPO_ROOT / folder).rglob("*.py"))


def _built_in(node: ast.AST, function: str, required: set[str]):
    """The innermost enclosing function of each dict under `node` built with all the `required` keys."""
    if required <= _keys(node):
        yield function
    inner = node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
    for child in ast.iter_child_nodes(node):
        yield from _built_in(child, inner, required)


def envelopes(paths, required: set[str], root: Path = REPO_ROOT) -> list[tuple[str, str]]:
    """(file relative to `root`, function) of every envelope built in `paths`."""
    return sorted(
        (path.relative_to(root).as_posix(), function)
        for path in paths
        for function in _built_in(ast.parse(path.read_text()), "<module>", required)
    )


def test_the_schema_s_required_keys_are_what_the_envelope_holds():
    from workload.result import envelope

    required = _required_keys()
    assert {"schema_version", "run_id", "status"} <= required
    built = envelope("train", error_class="interrupted", error="x", started_at="2026-01-01T00:00:00Z")
    assert required <= set(built) and built["status"] == "error"


def test_result_json_s_envelope_is_built_in_one_place():
    """Every other module (the workload's runs, `envbuild run`'s error envelope) calls `envelope`."""
    assert envelopes(_sources(), _required_keys()) == [OWNER]


def test_the_scan_sees_an_envelope_built_anywhere(tmp_path):
    """The scan is not blind: a second literal envelope, or one built with dict(...), is found by its function."""
    (tmp_path / "a.py").write_text(
        "def f():\n    return {'schema_version': 1, 'run_id': 'x', 'command': 'train', 'status': 'error',"
        " 'versions': {}}\n"
        "def g():\n    def inner():\n        return dict(schema_version=1, run_id='x', command='probe',"
        " status='fail', versions={})\n    return inner\n"
    )
    assert envelopes([tmp_path / "a.py"], _required_keys(), tmp_path) == [("a.py", "f"), ("a.py", "inner")]


def test_builder_names_the_result_file_as_the_workload_does():
    """One name, `RESULT_FILE` from workload/result.py: no alias of it, no other constant for "result.json"."""
    found = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            aliased = isinstance(node, ast.alias) and node.name == "RESULT_FILE" and node.asname
            literal = isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            if aliased or (literal and node.value.value == "result.json" and path != REPO_ROOT / OWNER[0]):
                found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert not found, "import RESULT_FILE from workload.result:\n" + "\n".join(found)
