"""Device discovery and bf16 support (missing code objects: pytorch#147626; visible-device
mismatches: pytorch#140318, pytorch#186516; bf16 keyed off torch.version.cuda: torchtune#597)."""

from __future__ import annotations

import os
import re
from typing import Mapping

import torch

from ._common import FAIL, PASS, SKIP, ProbeContext, is_rocm, result, synchronize
from .environment import device_arch

VISIBLE_DEVICE_VARS = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


def _count_listed(value: str) -> int:
    """How many devices a visible-devices list selects.

    Follows the CUDA/HIP rules as PyTorch's own `torch.cuda._parse_visible_devices` applies them:
    the list is read up to the first entry that is not a device index or UUID (e.g. "-1"),
    and a repeated entry selects nothing at all.
    """
    seen: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not re.fullmatch(r"\d+|(GPU|MIG)-[0-9A-Za-z-]+", entry):
            break
        if entry in seen:
            return 0
        seen.append(entry)
    return len(seen)


def visible_device_limit(env: Mapping[str, str], rocm: bool) -> tuple[int | None, str | None, list[str]]:
    """The number of devices the visible-device variables allow, the deciding variable, and notes.

    (None, None, []) means no variable restricts the devices. On ROCm, ROCR_VISIBLE_DEVICES
    is applied first (by the ROCr runtime) and HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES,
    selects among what is left; a CUDA build reads CUDA_VISIBLE_DEVICES alone.
    """
    notes: list[str] = []
    if not rocm:
        if "CUDA_VISIBLE_DEVICES" in env:
            return _count_listed(env["CUDA_VISIBLE_DEVICES"]), "CUDA_VISIBLE_DEVICES", notes
        return None, None, notes
    limit, var = None, None
    if "ROCR_VISIBLE_DEVICES" in env:
        limit, var = _count_listed(env["ROCR_VISIBLE_DEVICES"]), "ROCR_VISIBLE_DEVICES"
    hip_var = next((v for v in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") if v in env), None)
    if hip_var:
        if (
            "HIP_VISIBLE_DEVICES" in env
            and "CUDA_VISIBLE_DEVICES" in env
            and (env["HIP_VISIBLE_DEVICES"] != env["CUDA_VISIBLE_DEVICES"])
        ):
            notes.append("HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES differ; HIP_VISIBLE_DEVICES is used")
        selected = _count_listed(env[hip_var])
        if limit is not None and selected > limit:
            notes.append(f"{hip_var} selects {selected} devices but ROCR_VISIBLE_DEVICES leaves only {limit}")
        if limit is None or selected <= limit:
            limit, var = selected, hip_var
    return limit, var, notes


def check_device_count(device_count: int, limit: int | None, variable: str | None) -> tuple[str, str]:
    """Verdict on the device count torch reports against what the environment asks for."""
    if device_count == 0:
        where = f" ({variable} allows {limit})" if variable else ""
        return (
            FAIL,
            f"torch sees no GPU{where}: check the device nodes passed to the container and the visible-device variables",
        )
    if limit is not None and device_count != limit:
        return FAIL, (
            f"{variable} selects {limit} device(s) but torch.cuda.device_count() is {device_count}: "
            "the variable lists devices that do not exist or is not honoured by this runtime"
        )
    return PASS, ""


def arch_supported(arch: str, arch_list: list[str], rocm: bool) -> bool:
    """Whether this PyTorch build carries code for the device architecture (pytorch#147626).

    ROCm: the gcnArchName base (before the first ':', pytorch#107477) must be compiled in.
    CUDA: machine code for the same major and a minor not above the device's, or PTX
    (compute_XY) for a capability not above the device's, which the driver compiles.
    """
    if rocm:
        base = arch.split(":")[0]
        return base in {a.split(":")[0] for a in arch_list}
    m = re.fullmatch(r"sm_(\d+)(\d)", arch)
    if not m:
        return arch in arch_list
    major, minor = int(m.group(1)), int(m.group(2))
    for entry in arch_list:
        e = re.fullmatch(r"(sm|compute)_(\d+)(\d)[a-z]?", entry)
        if not e:
            continue
        kind, emaj, emin = e.group(1), int(e.group(2)), int(e.group(3))
        if kind == "sm" and emaj == major and emin <= minor:
            return True
        if kind == "compute" and (emaj, emin) <= (major, minor):
            return True
    return False


def device_discovery(ctx: ProbeContext) -> dict:
    """torch.version.hip/cuda, device count against the visible-device variables, arch in the build."""
    rocm = is_rocm()
    env = {k: os.environ[k] for k in VISIBLE_DEVICE_VARS if k in os.environ}
    count = torch.cuda.device_count()
    values = {
        "torch": torch.__version__,
        "hip": torch.version.hip,
        "cuda": torch.version.cuda,
        "device_type": ctx.device.type,
        "device_count": count,
        "visible_device_env": env,
    }
    if not ctx.on_gpu:
        return result("device_discovery", SKIP, values, "CPU device requested: no GPU to discover")
    limit, variable, notes = visible_device_limit(env, rocm)
    values["visible_device_limit"] = limit
    status, message = check_device_count(count, limit, variable)
    if status == FAIL:
        return result("device_discovery", status, values, "; ".join([message, *notes]))
    index = ctx.device.index if ctx.device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    arch = device_arch(index)
    arch_list = torch.cuda.get_arch_list()
    values.update(
        gpu_name=props.name,
        arch=arch,
        gcn_arch_name=props.gcnArchName if rocm else None,  # on CUDA torch fills it with the name
        arch_list=arch_list,
        total_memory_gib=round(props.total_memory / 2**30, 1),
    )
    supported = arch_supported(arch, arch_list, rocm)
    values["arch_in_arch_list"] = supported
    if not supported:
        notes.insert(
            0,
            f"this torch build has no code for {arch} (built for {', '.join(arch_list)}): "
            "kernels will fail with 'invalid device function'; use a build for this arch",
        )
        return result("device_discovery", FAIL, values, "; ".join(notes))
    return result("device_discovery", PASS, values, "; ".join(notes))


def _bf16_reported_by_torch() -> bool:
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # torch < 2.4 has no including_emulation argument
        return bool(torch.cuda.is_bf16_supported())


def bf16_support(ctx: ProbeContext) -> dict:
    """Ask torch, then do an actual bf16 matmul; never keyed off torch.version.cuda (torchtune#597)."""
    values: dict = {"device_type": ctx.device.type}
    reported = _bf16_reported_by_torch() if ctx.on_gpu else True
    values["torch_reports_bf16"] = reported
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(256, 256, generator=gen, dtype=torch.float64)
    b = torch.randn(256, 256, generator=gen, dtype=torch.float64)
    try:
        a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
        out = (a16.to(ctx.device) @ b16.to(ctx.device)).to("cpu", torch.float64)
        synchronize(ctx.device)
        ref = a16.double() @ b16.double()
        rel = float((out - ref).norm() / ref.norm())
        values["matmul_rel_error"] = rel
        # Output rounding alone gives about u/sqrt(3) = 2.3e-3; 8u leaves room for summation order.
        matmul_ok = rel < 8 * torch.finfo(torch.bfloat16).eps / 2
    except RuntimeError as exc:
        values["matmul_error"] = str(exc).splitlines()[0]
        matmul_ok = False
    values["matmul_ok"] = matmul_ok
    wanted = ctx.dtype in (None, torch.bfloat16)
    if reported and matmul_ok:
        return result("bf16_support", PASS, values)
    if not reported and matmul_ok:
        return result(
            "bf16_support",
            FAIL,
            values,
            "torch.cuda.is_bf16_supported() says no but a bf16 matmul works and is accurate: "
            "code that trusts the flag will needlessly disable bf16",
        )
    message = "bf16 matmul " + ("is inaccurate" if "matmul_rel_error" in values else "failed") + " on this device"
    if not wanted:
        return result("bf16_support", SKIP, values, message + " (this run does not use bf16)")
    return result("bf16_support", FAIL, values, message + ": use fp16 or fp32")
