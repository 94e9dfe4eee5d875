"""Environment probes run before training; each returns a pass/fail/skip record with measured values.

    from workload.probes import run_probes, PROBE_NAMES
    records = run_probes(torch.device("cuda"), tokenizer="path/to/tokenizer", dtype=torch.bfloat16)

Every record is {"name", "status": "pass"|"fail"|"skip", "values": {...}, "message"}
(docs/result-schema.md). A probe that raises becomes a "fail" record; run_probes never raises
for a probe's sake. When torch.distributed is initialised, call run_probes on every rank:
the collective probes are collective operations. See docs/probes.md.

Beside the probes live what they read from the environment: `environment` (device and dtype choice, package
versions, GPU identity, peak FLOP/s) and `probe_table` (the records as a text table). Imports `workload.binaries`
(the arch probe's code-object reader) and `workload.__version__`; never `workload.training`, the runner or the
CLI. Imported by the runner, `workload.launch` (device counts), the CLI (the table), `workload.model.predict`
(device and dtype) and bench/ (pyproject.toml [tool.importlinter], tests/project/test_layering.py).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ._common import ProbeContext, run_guarded
from .attention import sdpa_vs_math
from .code_object_probe import arch_code_objects
from .collective import collective_smoke, multi_rank_collective
from .device import bf16_support, device_discovery
from .gemm import gemm_accuracy
from .rmsnorm import rmsnorm_stability
from .rocm_libs import hipblaslt, miopen_cache_dir
from .tokenizer import tokenizer_integrity

PROBES: dict[str, Callable[[ProbeContext], dict]] = {
    "device_discovery": device_discovery,
    "arch_code_objects": arch_code_objects,
    "bf16_support": bf16_support,
    "gemm_accuracy": gemm_accuracy,
    "rmsnorm_stability": rmsnorm_stability,
    "sdpa_vs_math": sdpa_vs_math,
    "tokenizer_integrity": tokenizer_integrity,
    "collective_smoke": collective_smoke,
    "multi_rank_collective": multi_rank_collective,
    "miopen_cache_dir": miopen_cache_dir,
    "hipblaslt": hipblaslt,
}
PROBE_NAMES: list[str] = list(PROBES)


def run_probes(
    device: torch.device | str,
    *,
    tokenizer: Any = None,
    dtype: torch.dtype | None = None,
    only: list[str] | None = None,
) -> list[dict]:
    """Run the probes (all, or those named in `only`, in PROBE_NAMES order) on `device`.

    `tokenizer` is a transformers tokenizer or a tokenizer directory (None: the tokenizer
    probe is skipped). `dtype` is the run's training dtype: fp16 or bf16 narrows the
    half-precision probes to it; None or fp32 tests both.
    """
    if only is not None:
        unknown = sorted(set(only) - set(PROBES))
        if unknown:
            raise ValueError(f"unknown probe name(s) {unknown}; known: {PROBE_NAMES}")
    ctx = ProbeContext(device=torch.device(device), dtype=dtype, tokenizer=tokenizer)
    return [run_guarded(name, fn, ctx) for name, fn in PROBES.items() if only is None or name in only]


__all__ = ["PROBE_NAMES", "run_probes"]
