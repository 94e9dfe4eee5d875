"""The training step and its speed levers: the loop (`loop`), batching, varlen attention, merged q/k/v,
whole-step graphs, packing/compile (`speed`), data parallelism, the recipes (`presets`), third-party output
(`noise`), metrics and the pass bar.

Imports only itself and `workload.errors`. Imported by the runner, the CLI, `workload.settings`,
`workload.model.predict` (autocast, batching) and bench/; never imports the runner, the CLI or `workload.probes`
(pyproject.toml [tool.importlinter], tests/project/test_layering.py).
"""
