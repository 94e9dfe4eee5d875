"""The data: labelled text loading (`dataset`), beside the bundled data files (emotions.jsonl, the default
dataset, shipped as package data).

Imports only itself and `workload.errors`. Imported by the runner, `workload.model.predict`, bench/ and the
tests; never imports the runner or the CLI (pyproject.toml [tool.importlinter], tests/project/test_layering.py).
"""
