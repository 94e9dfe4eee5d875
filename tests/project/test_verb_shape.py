"""Every verb of the CLI is a thin mapping (docs/develop.md, "The shape of a verb"): its function, from `def` to its
last line, is under 50 lines and makes exactly one call to a function of builder.workflows, with a typed request."""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap

import click
import pytest

from builder.cli import COMMANDS, main

MAX_LINES = 50


def _verbs() -> dict[str, click.Command]:
    """{"matrix import": command, ...}: every command under the group, sub-commands of groups included."""
    verbs = {}

    def walk(name: str, command: click.Command) -> None:
        if isinstance(command, click.Group):
            for sub, child in command.commands.items():
                walk(f"{name} {sub}", child)
        else:
            verbs[name] = command

    for name in COMMANDS:
        walk(name, main.get_command(click.Context(main), name))
    return verbs


VERBS = _verbs()


def _workflow_calls(function) -> list[str]:
    """The calls in `function`'s body to functions defined in builder.workflows (not its request classes), resolved
    through the module's names and the function's own imports."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    names = dict(function.__globals__)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            module = importlib.import_module(node.module)
            for alias in node.names:
                names[alias.asname or alias.name] = getattr(module, alias.name, None) or importlib.import_module(
                    f"{node.module}.{alias.name}"
                )

    def resolve(expr):
        if isinstance(expr, ast.Name):
            return names.get(expr.id)
        if isinstance(expr, ast.Attribute):
            return getattr(resolve(expr.value), expr.attr, None)
        return None

    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            target = resolve(node.func)
            if inspect.isfunction(target) and target.__module__.startswith("builder.workflows."):
                calls.append(f"{target.__module__}.{target.__name__}")
    return calls


def _length(function) -> int:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    return tree.end_lineno - tree.lineno + 1


def test_every_verb_is_found():
    assert {
        "image",
        "render",
        "run workload",
        "matrix import",
        "matrix verify",
        "slurm collect",
        "recipes check-upstream",
    } <= set(VERBS)


@pytest.mark.parametrize("name", sorted(VERBS))
def test_a_verb_is_short_and_calls_one_workflow(name):
    function = inspect.unwrap(VERBS[name].callback)
    assert _length(function) < MAX_LINES, f"{name}: {_length(function)} lines"
    assert len(_workflow_calls(function)) == 1, f"{name}: {_workflow_calls(function)}"


def _does_the_work_itself(store, result, result_path):
    """A verb as `run workload` was: it runs the workload and records it itself (two workflow calls)."""
    from builder.workflows.run import RunWorkloadRequest, record_run, run_workload

    outcome = run_workload(RunWorkloadRequest(), print)
    return record_run(store, outcome.result, result_path)


def test_the_check_sees_a_verb_that_does_the_work_itself():
    assert _workflow_calls(_does_the_work_itself) == [
        "builder.workflows.run.run_workload",
        "builder.workflows.run.record_run",
    ]
