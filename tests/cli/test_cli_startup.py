"""The CLI answers at once: importing it, or asking for help, loads no heavy module; each command is
imported only when it runs (timings: bench/cli_startup.py, not here)."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from builder.cli import COMMANDS, main

HEAVY = ("matplotlib", "docker", "torch", "transformers", "jinja2", "pydantic")


def _modules_after(code: str) -> set[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return {name.split(".")[0] for name in json.loads(proc.stdout.splitlines()[-1])}


@pytest.mark.parametrize(
    "code",
    [
        "import builder.cli",
        "from builder.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
    ],
    ids=["import", "envbuild --help"],
)
def test_the_cli_loads_no_heavy_module(code):
    loaded = _modules_after(code)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_render_help_loads_neither_docker_nor_matplotlib_nor_pydantic():
    loaded = _modules_after(
        "from builder.cli import main\ntry:\n    main(['render', '--help'])\nexcept SystemExit:\n    pass"
    )
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_help_summary_is_the_commands_own_first_line(name):
    module, attribute, summary = COMMANDS[name]
    command = getattr(__import__(module, fromlist=[attribute]), attribute)
    first_line = (command.help or "").split("\n\n")[0].replace("\n", " ").strip()
    assert summary == " ".join(first_line.split())


def test_group_help_lists_every_command_in_full():
    from click.testing import CliRunner

    result = CliRunner().invoke(main, ["--help"], terminal_width=80)
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for name, (_, _, summary) in COMMANDS.items():
        assert f"{name} {summary}" in text  # never cut mid-parenthesis
    assert isinstance(main.get_command(click.Context(main), "render"), click.Command)
    assert "2 bad input" in text


def test_matrix_commands_that_neither_sign_nor_verify_load_no_signing_library():
    """securesystemslib (~0.1 s to import) loads only when an attestation is made or read."""
    loaded = _modules_after(
        "from builder.cli import main\ntry:\n    main(['matrix', 'list', '--help'])\nexcept SystemExit:\n    pass"
    )
    assert "securesystemslib" not in loaded
