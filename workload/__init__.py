"""The in-image fine-tune and environment probes. Depends on torch/transformers/peft only; never imports `builder`.

The top level wires the rooms: `cli` -> `runner` (with `launch`, `settings`, `errors`, `result`) -> `training`,
`model`, `data`, `probes` -> `binaries`. Lower rooms never import the runner or the CLI, and `probes` and
`training` never import each other (pyproject.toml [tool.importlinter], tests/project/test_layering.py).
"""

__version__ = "0.1.0"
