"""One meaning per private helper name in builder/: a module-level `def _name` (not a dunder) is defined in one
module only. Two modules doing the same job share one function (public, in the lower module); two different jobs
get names that say which (`_stop_container`, `_stop_build_client`), so a reader or a grep never meets two
meanings under one name.

One test scans builder/ as it is; the other hands the scan two modules with one name and sees it reported."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from repo import REPO_ROOT


def private_helpers(root: Path) -> dict[str, list[str]]:
    """{name: [module paths, relative to root's parent]} of every module-level private function under `root`."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if node.name.startswith("_") and not node.name.startswith("__"):
                found[node.name].append(path.relative_to(root.parent).as_posix())
    return found


def shared_names(root: Path) -> dict[str, list[str]]:
    """The private helper names defined in more than one module, with those modules."""
    return {name: paths for name, paths in private_helpers(root).items() if len(set(paths)) > 1}


def test_no_private_helper_name_is_defined_in_two_builder_modules():
    shared = shared_names(REPO_ROOT / "builder")
    assert not shared, "one name, two meanings (rename each for its job, or share one function): " + "; ".join(
        f"{name} in {', '.join(paths)}" for name, paths in sorted(shared.items())
    )


def test_the_scan_reports_a_name_two_modules_define(tmp_path):
    package = tmp_path / "builder"
    (package / "engine").mkdir(parents=True)
    (package / "engine" / "one.py").write_text("def _stop(proc):\n    proc.kill()\n\n\ndef __getattr__(name): ...\n")
    (package / "two.py").write_text(
        "class Box:\n    def _stop(self): ...\n\n\ndef outer():\n    def _stop(): ...\n\n\ndef __getattr__(name): ...\n"
    )
    assert shared_names(package) == {}  # methods, nested functions and dunders are not module-level helpers
    (package / "two.py").write_text("async def _stop(container):\n    await container.kill()\n")
    assert shared_names(package) == {"_stop": ["builder/engine/one.py", "builder/two.py"]}
