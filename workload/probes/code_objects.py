"""GPU code objects for the device's arch (pitfall 1: "HIP error: invalid device function").

The probe reads the device's base arch (`gcnArchName` up to the first ':', e.g. gfx90a from
`gfx90a:sramecc+:xnack-`, pytorch#107477) and checks that torch was compiled for it
(`torch._C._cuda_getArchFlags()`, the list `torch.cuda.get_arch_list()` splits) and that the HIP fat
binaries and rocBLAS/hipBLASLt kernel files under torch/lib and /opt/rocm/lib carry code for it
(workload.codeobjects: clang offload bundles, no ROCm tools needed). ROCm only; skipped elsewhere.
"""

from __future__ import annotations

import torch

from ..codeobjects import coverage, torch_paths
from ._common import FAIL, PASS, SKIP, ProbeContext, is_rocm, result


def arch_code_objects(ctx: ProbeContext) -> dict:
    if not is_rocm() or not ctx.on_gpu:
        return result("arch_code_objects", SKIP, {}, "not a ROCm GPU run: no HIP code objects to check")
    index = ctx.device.index if ctx.device.index is not None else torch.cuda.current_device()
    arch = torch.cuda.get_device_properties(index).gcnArchName.split(":")[0]
    flags = sorted({f.split(":")[0] for f in (torch._C._cuda_getArchFlags() or "").split()})
    cov = coverage(torch_paths(), arch)
    values = {"arch": arch, "compiled_archs": flags, "code_object_archs": cov.archs, "verdict": cov.verdict,
              "missing_in": cov.missing_in()}
    problems = []
    if arch not in flags:
        problems.append(f"torch was compiled for {', '.join(flags) or 'no arch'}, not {arch}")
    if cov.verdict == "missing":
        problems.append(f"no {arch} code objects in {', '.join(cov.missing_in())}")
    message = "; ".join(problems) + (": kernels would fail with 'HIP error: invalid device function'"
                                     if problems else "")
    return result("arch_code_objects", FAIL if problems else PASS, values, message)
