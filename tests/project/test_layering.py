"""The import contracts in pyproject.toml ([tool.importlinter]), checked with import-linter: builder's layers
(cli -> workflows -> engine|report|attest -> store -> plan, arrows only down), the CLI importing the workflows and
the neutral modules only (no import ignored), the engine never importing
the store, its neutral modules (paths, slug, strict_json, bounded_read, interrupt, as_found, build_inputs, sbom,
known_secrets) importing none of its
packages, no import circles between builder's modules, workload
never importing builder, workload's layers (cli -> runner -> training/model/data/probes -> binaries), probes and
training independent, no circles between workload's modules, and workload.binaries free of torch. The repo
keeps them; a copy with one bad import breaks the one it should."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = "builder layers: cli -> workflows -> engine|report|attest -> store -> plan"
CLI_THIN = "builder.cli imports builder.workflows and the neutral modules only"
NO_STORE = "builder.engine never imports the store"
NEUTRAL = "builder's neutral top-level modules import no package"
ACYCLIC = "no import circles between builder's modules (function-level imports count too)"
WORKLOAD = "workload never imports builder"
W_LAYERS = "workload layers: cli -> runner -> training|model|data|probes -> binaries"
W_INDEPENDENT = "workload.probes and workload.training never import each other"
W_ACYCLIC = "no import circles between workload's modules (function-level imports count too)"
W_STDLIB = "workload.binaries imports none of torch, numpy, transformers, peft"
ALL_KEPT = {
    name: "KEPT"
    for name in (LAYERS, CLI_THIN, NO_STORE, NEUTRAL, ACYCLIC, WORKLOAD, W_LAYERS, W_INDEPENDENT, W_ACYCLIC, W_STDLIB)
}


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """`lint-imports` on the packages under `root`, with `root` first on the path and no cache written."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
            "--no-cache",
            "--no-logo",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def contract_lines(output: str) -> dict[str, str]:
    """{contract name: "KEPT" | "BROKEN"} from lint-imports' summary lines (a count of ignored imports may follow)."""
    out = {}
    for line in output.splitlines():
        found = re.fullmatch(r"(.+) (KEPT|BROKEN)( \(\d+ ignored imports?\))?", line)
        if found:
            out[found[1]] = found[2]
    return out


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """builder/, workload/ and pyproject.toml copied under tmp_path, to be broken there."""
    for package in ("builder", "workload"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def add_import(module: Path, statement: str) -> None:
    """Put `statement` right after the module's `from __future__` line (a module-level import)."""
    text = module.read_text()
    marker = "from __future__ import annotations\n"
    assert marker in text, module
    module.write_text(text.replace(marker, f"{marker}\n{statement}\n", 1))


def test_the_repo_keeps_its_import_contracts():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert contract_lines(done.stdout) == ALL_KEPT, done.stdout


def test_an_upward_import_breaks_the_layers_contract(repo_copy):
    add_import(repo_copy / "builder" / "plan" / "recipes.py", "import builder.cli.render")
    done = lint_imports(repo_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    assert contract_lines(done.stdout)[LAYERS] == "BROKEN", done.stdout
    assert "builder.plan.recipes -> builder.cli.render" in done.stdout


@pytest.mark.parametrize(
    ("module", "statement", "edge"),
    [
        ("doctor.py", "import builder.engine.doctor", "builder.cli.doctor -> builder.engine.doctor"),
        ("matrix.py", "import builder.store.summary", "builder.cli.matrix -> builder.store.summary"),
        ("inspect.py", "import workload.binaries.code_object_reader", "builder.cli.inspect -> workload.binaries"),
        ("run.py", "import builder.engine.routes", "builder.cli.run -> builder.engine.routes"),
        ("run.py", "import builder.store.store", "builder.cli.run -> builder.store.store"),
    ],
)
def test_a_verb_reaching_past_the_workflows_breaks_the_cli_contract(repo_copy, module, statement, edge):
    add_import(repo_copy / "builder" / "cli" / module, statement)
    done = lint_imports(repo_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    assert contract_lines(done.stdout) == {**ALL_KEPT, CLI_THIN: "BROKEN"}, done.stdout
    assert edge in done.stdout


def test_the_cli_contract_ignores_no_import():
    """Every verb is under the contract: it lists no import as an exception."""
    text = (ROOT / "pyproject.toml").read_text()
    contract = text[text.index('id = "builder-cli-thin"') :].split("[[tool.importlinter.contracts]]")[0]
    assert "ignore_imports" not in contract, contract


def test_a_circle_within_a_layer_breaks_the_acyclic_contract(repo_copy):
    add_import(repo_copy / "builder" / "plan" / "cells.py", "import builder.plan.resolve")  # resolve imports cells
    done = lint_imports(repo_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    assert contract_lines(done.stdout) == {**ALL_KEPT, ACYCLIC: "BROKEN"}, done.stdout


def test_workload_importing_builder_breaks_its_contract(repo_copy):
    add_import(repo_copy / "workload" / "binaries" / "code_object_reader.py", "import builder.paths")
    done = lint_imports(repo_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    assert contract_lines(done.stdout)[WORKLOAD] == "BROKEN", done.stdout
    assert "workload.binaries.code_object_reader -> builder.paths" in done.stdout


def test_the_engine_importing_the_store_breaks_its_contract(repo_copy):
    add_import(repo_copy / "builder" / "engine" / "local_run.py", "import builder.store.store")
    done = lint_imports(repo_copy)
    assert done.returncode != 0
    assert contract_lines(done.stdout) == {**ALL_KEPT, NO_STORE: "BROKEN"}, done.stdout
    assert "builder.engine.local_run -> builder.store.store" in done.stdout


def test_a_neutral_module_importing_a_package_breaks_the_neutral_contract(repo_copy):
    add_import(repo_copy / "builder" / "slug.py", "import builder.plan.cells")
    done = lint_imports(repo_copy)
    assert done.returncode != 0
    assert contract_lines(done.stdout) == {**ALL_KEPT, NEUTRAL: "BROKEN"}, done.stdout
    assert "builder.slug -> builder.plan.cells" in done.stdout


def test_a_room_importing_the_runner_breaks_the_workload_layers(repo_copy):
    add_import(repo_copy / "workload" / "data" / "dataset.py", "import workload.runner")
    done = lint_imports(repo_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    assert contract_lines(done.stdout)[W_LAYERS] == "BROKEN", done.stdout
    assert "workload.data.dataset -> workload.runner" in done.stdout


def test_a_probe_importing_training_breaks_their_independence(repo_copy):
    add_import(repo_copy / "workload" / "probes" / "gemm.py", "import workload.training.presets")
    done = lint_imports(repo_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    assert contract_lines(done.stdout) == {**ALL_KEPT, W_INDEPENDENT: "BROKEN"}, done.stdout
    assert "workload.probes.gemm -> workload.training.presets" in done.stdout


def test_a_circle_through_the_top_level_breaks_the_workload_acyclic_contract(repo_copy):
    add_import(
        repo_copy / "workload" / "training" / "presets.py", "import workload.settings"
    )  # settings imports presets
    done = lint_imports(repo_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    assert contract_lines(done.stdout) == {**ALL_KEPT, W_ACYCLIC: "BROKEN"}, done.stdout


def test_torch_in_the_binary_readers_breaks_their_contract(repo_copy):
    add_import(repo_copy / "workload" / "binaries" / "elf_needed.py", "import torch")
    done = lint_imports(repo_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    assert contract_lines(done.stdout) == {**ALL_KEPT, W_STDLIB: "BROKEN"}, done.stdout
    assert "workload.binaries.elf_needed -> torch" in done.stdout
