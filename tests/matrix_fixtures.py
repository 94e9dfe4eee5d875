"""Result dicts that follow docs/result-schema.md, for the store, matrix and report tests."""

from __future__ import annotations

import copy
import uuid

_BASE = {
    "schema_version": 1,
    "command": "train",
    "status": "pass",
    "error_class": None,
    "error": None,
    "started_at": "2026-12-02T13:00:00Z",
    "finished_at": "2026-12-02T13:00:41Z",
    "wall_time_s": 41.2,
    "versions": {
        "python": "3.10.14",
        "torch": "2.4.1+rocm6.2",
        "hip": "6.2.41133-dd7f95766",
        "cuda": None,
        "transformers": "4.46.3",
        "peft": "0.13.2",
        "accelerate": "1.1.1",
        "sentencepiece": "0.2.0",
        "safetensors": "0.4.5",
        "numpy": "1.26.4",
        "workload": "0.1.0",
    },
    "hardware": {
        "device_type": "cuda",
        "vendor": "amd",
        "gpu_name": "AMD Instinct MI250X",
        "arch": "gfx90a",
        "gpu_count": 1,
        "peak_tflops": 191.5,
    },
    "model": {
        "id": "tiny-gemma",
        "revision": None,
        "family": "gemma",
        "num_parameters": 123456,
        "trainable_parameters": 4567,
    },
    "dataset": {
        "path": "emotions.jsonl",
        "sha256": "ab" * 32,
        "n_train": 180,
        "n_eval": 45,
        "labels": ["anger", "joy", "neutral"],
    },
    "config": {"preset": "smoke", "seed": 42, "dtype": "bf16", "world_size": 1},
    "metrics": {
        "eval_before": {"accuracy": 0.14, "macro_f1": 0.05, "loss": 1.95},
        "eval_after": {"accuracy": 0.71, "macro_f1": 0.69, "loss": 0.88},
        "curves": {
            "train_loss": [[1, 1.95], [2, 1.7], [3, 1.2], [4, 0.9]],
            "grad_norm": [[1, 3.1], [2, 2.8], [3, 2.0], [4, 1.5]],
        },
        "steps": 4,
        "samples_per_s": 52.1,
        "tokens_per_s": 1830.0,
        "mfu": 0.21,
        "peak_memory_allocated_bytes": 2_000_000_000,
        "peak_memory_reserved_bytes": 2_400_000_000,
    },
    "probes": [
        {"name": "device_discovery", "status": "pass", "values": {"device_count": 1}, "message": ""},
        {"name": "sdpa_vs_math", "status": "pass", "values": {"max_abs_err": 0.0004}, "message": ""},
    ],
    "artifacts": {"adapter_dir": "adapter"},
}


def make_result(**overrides) -> dict:
    """A complete rocm6.2-torch2.4-gfx90a-py3.10 train result; keyword arguments replace top-level keys."""
    result = copy.deepcopy(_BASE)
    result["run_id"] = uuid.uuid4().hex
    result.update(copy.deepcopy(overrides))
    return result


def failed_result(error_class: str = "nan_loss", error: str = "loss became NaN at step 3", **overrides) -> dict:
    return make_result(status="fail", error_class=error_class, error=error, **overrides)


def with_probe_failure(result: dict, name: str = "sdpa_vs_math") -> dict:
    for probe in result["probes"]:
        if probe["name"] == name:
            probe.update(status="fail", message="max abs error 0.2 > 0.01")
    return result


def cpu_result(**overrides) -> dict:
    """A cpu-torch2.13-py3.11 result, as `envbuild run workload --local` produces on this machine."""
    versions = dict(_BASE["versions"], python="3.11.7", torch="2.13.0+cpu", hip=None)
    hardware = {
        "device_type": "cpu",
        "vendor": "cpu",
        "gpu_name": None,
        "arch": None,
        "gpu_count": 0,
        "peak_tflops": None,
    }
    metrics = dict(copy.deepcopy(_BASE["metrics"]), mfu=None)
    base = {"versions": versions, "hardware": hardware, "metrics": metrics}
    base.update(overrides)
    return make_result(**base)


def speed_result(**overrides) -> dict:
    """A `speed` preset result (the standard speed measurement) of the rocm6.2-torch2.4-gfx90a-py3.10 cell."""
    base = {
        "config": {"preset": "speed", "seed": 0, "dtype": "bf16", "world_size": 1},
        "model": {
            "id": "gemma-2b-shape",
            "revision": None,
            "family": "gemma",
            "num_parameters": 2_506_172_416,
            "trainable_parameters": 9_000_000,
        },
        "dataset": {
            "path": "synthetic",
            "sha256": "cd" * 32,
            "n_train": 4096,
            "n_eval": 512,
            "labels": ["c0", "c1", "c2", "c3"],
        },
        "invocation": {
            "argv": ["python", "-m", "workload", "train", "--preset", "speed"],
            "preset": "speed",
            "model": "gemma-2b-shape",
            "revision": None,
            "overrides": {},
            "probes": True,
            "data": {"name": "synthetic", "bundled": False, "sha256": "cd" * 32},
            "envbuild": ["envbuild", "run", "workload", "--image", "envbuild/rocm:abc", "--preset", "speed"],
        },
    }
    base.update(overrides)
    result = make_result(**base)
    result["metrics"].update(samples_per_s=612.5, tokens_per_s=40_900.0, mfu=0.407)
    return result
