"""GPU code objects for the device's arch (pitfall 1: "HIP error: invalid device function").

The probe reads the device's base arch (`gcnArchName` up to the first ':', e.g. gfx90a from
`gfx90a:sramecc+:xnack-`, pytorch#107477) and checks that torch was compiled for it
(`torch._C._cuda_getArchFlags()`, the list `torch.cuda.get_arch_list()` splits) and that the libraries torch
loads carry code for it: torch's own libraries in torch/lib and the ROCm libraries they name in DT_NEEDED,
transitively, with the rocBLAS/hipBLASLt kernel dirs of those (workload.binaries.code_object_reader.loaded_split: clang
offload bundles and ELF headers, no ROCm tools needed), in torch/lib and the ROCm lib dirs (the legacy /opt/rocm/lib,
TheRock's /opt/rocm/core-<version>/lib: workload.binaries.rocm_layout). A library there that nothing torch
loads may target other GPUs (hipSPARSELt ships gfx942/gfx950 only): that is a note in the message and
`values["other_missing_in"]`, not a failure. ROCm only; skipped elsewhere.
"""

from __future__ import annotations

import torch

from ..binaries.code_object_reader import library_dirs, loaded_split
from ._common import FAIL, PASS, SKIP, ProbeContext, is_rocm, result


def arch_code_objects(ctx: ProbeContext) -> dict:
    if not is_rocm() or not ctx.on_gpu:
        return result("arch_code_objects", SKIP, {}, "not a ROCm GPU run: no HIP code objects to check")
    index = ctx.device.index if ctx.device.index is not None else torch.cuda.current_device()
    arch = torch.cuda.get_device_properties(index).gcnArchName.split(":")[0]
    flags = sorted({f.split(":")[0] for f in (torch._C._cuda_getArchFlags() or "").split()})
    torch_lib, rocm_libs = library_dirs()
    loaded, other = loaded_split(torch_lib, rocm_libs, arch)
    values = {
        "arch": arch,
        "compiled_archs": flags,
        "code_object_archs": loaded.archs,
        "verdict": loaded.verdict,
        "missing_in": loaded.missing_in(),
        "other_missing_in": other.missing_in(),
    }
    problems = []
    if arch not in flags:
        problems.append(f"torch was compiled for {', '.join(flags) or 'no arch'}, not {arch}")
    if loaded.verdict == "missing":
        problems.append(f"no {arch} code objects in {', '.join(loaded.missing_in())} (loaded by torch)")
    message = "; ".join(problems) + (
        ": kernels would fail with 'HIP error: invalid device function'" if problems else ""
    )
    if other.missing_in():
        message += ("; " if message else "") + (
            f"note: {arch} is missing in {', '.join(other.missing_in())}, which torch does not load"
        )
    return result("arch_code_objects", FAIL if problems else PASS, values, message)
