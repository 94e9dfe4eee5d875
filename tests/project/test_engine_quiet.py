"""The engine says nothing itself: no module under builder/engine imports rich or calls print(). It tells what
happens through a `notify` callback (lines, or small event records), and the CLI renders them. Read from each
module's syntax tree, so a function-level import or a print in a branch counts too."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "builder" / "engine"


def presentation(source: str) -> list[str]:
    """What in `source` talks to a terminal itself: each import of rich and each call of print(), with its line."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] == "rich"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "rich":
            found.append(f"{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            found.append(f"{node.lineno}: print()")
    return sorted(found, key=lambda line: int(line.split(":")[0]))


def test_no_engine_module_imports_rich_or_prints():
    modules = sorted(ENGINE.glob("*.py"))
    assert len(modules) > 20, modules
    loud = {path.stem: found for path in modules if (found := presentation(path.read_text()))}
    assert loud == {}


def test_the_check_sees_every_way_of_printing():
    source = (
        "import rich\nimport rich.console as c\nfrom rich.markup import escape\n"
        "def f():\n    from rich.progress import Progress\n    if x:\n        print('hi')\n"
        "SCRIPT = 'print(1)'\nfrom .rich import y\nlogger.print('not the builtin')\n"
    )
    assert presentation(source) == [
        "1: import rich",
        "2: import rich.console",
        "3: from rich.markup import ...",
        "5: from rich.progress import ...",
        "7: print()",
    ]
