"""Where the workload runs: device and dtype choice, package versions, GPU identity and peak FLOP/s for MFU."""

from __future__ import annotations

import importlib.metadata
import platform

import torch

from .. import __version__

# Dense bf16/fp16 peak per device (TFLOP/s), matched on the device name; see docs/workload.md for sources.
# Order matters: the first substring found wins. H100 PCIe/NVL have other peaks and stay unknown.
PEAK_TFLOPS = (("MI300X", 1307.0), ("MI250X", 191.5), ("H200", 989.0), ("H100", 989.0))
_NOT_SXM = ("PCIE", "NVL")


def peak_tflops(gpu_name: str | None) -> float | None:
    if not gpu_name:
        return None
    name = gpu_name.upper()
    for key, value in PEAK_TFLOPS:
        if key in name:
            if key == "H100" and any(tag in name for tag in _NOT_SXM):
                return None
            return value
    return None


def pick_device(requested: str = "auto") -> torch.device:
    """ "auto": the first GPU when torch sees one (CUDA or ROCm, both via torch.cuda), else the CPU."""
    if requested == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"device {requested!r} requested but torch sees no GPU "
            f"(torch {torch.__version__}, hip={torch.version.hip}, cuda={torch.version.cuda})"
        )
    return device


def resolve_dtype(requested: str, device: torch.device) -> str:
    """ "auto": bf16 on GPUs that support it (MI200/MI300, Ampere+), fp16 on other GPUs, fp32 on CPU."""
    if requested != "auto":
        if requested not in ("fp32", "bf16", "fp16"):
            raise ValueError(f"unknown dtype {requested!r}: use auto, fp32, bf16 or fp16")
        return requested
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "fp32"


TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> dict:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "hip": torch.version.hip,
        "cuda": torch.version.cuda,
        **{
            name: _installed_version(name)
            for name in ("transformers", "peft", "accelerate", "sentencepiece", "safetensors", "numpy")
        },
        "workload": __version__,
    }


def device_arch(device: torch.device | int) -> str:
    """The GPU target: the gcnArchName base on ROCm ("gfx90a", pytorch#107477), "sm_XY" on CUDA."""
    props = torch.cuda.get_device_properties(device)
    if torch.version.hip:
        return props.gcnArchName.split(":")[0]
    return f"sm_{props.major}{props.minor}"


def hardware(device: torch.device) -> dict:
    """GPU identity; `gpu_count` is how many GPUs this process sees."""
    if device.type != "cuda":
        return {
            "device_type": "cpu",
            "vendor": "cpu",
            "gpu_name": None,
            "arch": None,
            "gpu_count": 0,
            "peak_tflops": None,
        }
    props = torch.cuda.get_device_properties(device)
    vendor = "amd" if torch.version.hip else "nvidia"
    return {
        "device_type": "cuda",
        "vendor": vendor,
        "gpu_name": props.name,
        "arch": device_arch(device) or None,
        "gpu_count": torch.cuda.device_count(),
        "peak_tflops": peak_tflops(props.name),
    }
