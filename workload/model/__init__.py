"""The model: Gemma-family classifiers with their LoRA wiring and classifier head, adapter export and reload
(`classifier`), tiny random configs and their tokenizer (`tiny`), and inference with a saved adapter
(`predict`).

Imports `workload.errors`, `workload.training` (predict: autocast, batching), `workload.data` (predict: the
length limit) and `workload.probes.environment` (predict: device and dtype). Imported by the runner, the CLI
and bench/; never imports the runner or the CLI (pyproject.toml [tool.importlinter], tests/project/test_layering.py).
"""
