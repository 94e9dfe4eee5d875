"""ROCm library checks: MIOpen's writable directories (ROCm/MIOpen#1295) and hipBLASLt availability
(pytorch#138067).

MIOpen keeps a user performance database in MIOPEN_USER_DB_PATH (default $HOME/.config/miopen)
and compiled kernels in MIOPEN_CUSTOM_CACHE_DIR (default $HOME/.cache/miopen); it creates them
on first use. A container whose home is read-only fails there (ROCm/MIOpen#1295).
Sources: MIOpen docs "Kernel cache" (rocm.docs.amd.com/projects/MIOpen/en/latest/conceptual/cache.html)
and "Setting up locations" in the MIOpen install guide.

hipBLASLt: PyTorch on ROCm keeps its own list of archs hipBLASLt supports and, on any other
arch, overrides a request for it back to hipBLAS/rocBLAS with the warning "Attempting to use
hipBLASLt on an unsupported architecture!" (pytorch#138067, fixed by pytorch#138267; older
builds raised that as a RuntimeError inside the GEMM). The probe asks torch for the Lt
backend, reads back what torch granted, and runs an addmm (the Lt path) against fp64.
"""

from __future__ import annotations

import os
import tempfile
import warnings

import torch

from ._common import FAIL, PASS, SKIP, ProbeContext, is_rocm, result, synchronize

MIOPEN_DIRS = {
    "MIOPEN_USER_DB_PATH": "~/.config/miopen",
    "MIOPEN_CUSTOM_CACHE_DIR": "~/.cache/miopen",
}


def miopen_dirs(env: dict[str, str]) -> dict[str, str]:
    """Variable -> the directory MIOpen will write, from the environment or its default."""
    return {var: os.path.expanduser(env.get(var) or default) for var, default in MIOPEN_DIRS.items()}


def dir_writable(path: str) -> tuple[bool, str]:
    """Create `path` if missing (as MIOpen does) and write and delete a file in it."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".envbuild-probe-"):
            pass
    except OSError as exc:
        return False, f"{type(exc).__name__}: {exc.strerror or exc}"
    return True, ""


def miopen_cache_dir(ctx: ProbeContext) -> dict:
    dirs = miopen_dirs(dict(os.environ))
    values: dict = dict(dirs)
    if not is_rocm():  # nothing is created or written outside ROCm
        return result("miopen_cache_dir", SKIP, values, "not a ROCm build: MIOpen is not used")
    problems = []
    for var, path in dirs.items():
        ok, why = dir_writable(path)
        values[f"{var}_writable"] = ok
        if not ok:
            problems.append(f"{path} ({var}) is not writable: {why}; set {var} to a writable directory")
    return result("miopen_cache_dir", FAIL if problems else PASS, values, "; ".join(problems))


def _granted_lt(backend) -> bool:
    return "lt" in str(backend).lower()


def lt_gemm_check(device: torch.device, choose, addmm=torch.addmm) -> tuple[str, dict, str]:
    """Ask `choose` (torch.backends.cuda.preferred_blas_library) for the Lt backend, run a bf16
    addmm against fp64 if granted, and restore the previous preference whatever happens."""
    before = choose()
    values: dict = {"default_blas_library": str(before)}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            granted = choose("cublaslt")  # the hipBLASLt backend on ROCm builds
        values["granted_blas_library"] = str(granted)
        values["torch_warning"] = next((str(w.message) for w in caught), None)
        if not _granted_lt(granted):
            return SKIP, values, "torch does not use hipBLASLt on this arch and falls back to hipBLAS/rocBLAS"
        gen = torch.Generator().manual_seed(4)
        a, b, bias = (torch.randn(*s, generator=gen).to(torch.bfloat16) for s in ((512, 1024), (1024, 256), (256,)))
        out = addmm(bias.to(device), a.to(device), b.to(device))
        synchronize(device)
        ref = torch.addmm(bias.double(), a.double(), b.double())
        values["addmm_rel_error"] = float((out.double().cpu() - ref).norm() / ref.norm())
    except RuntimeError as exc:
        return FAIL, values, f"GEMM through hipBLASLt failed: {str(exc).splitlines()[0]}"
    finally:
        choose(before)
    limit = 8 * torch.finfo(torch.bfloat16).eps / 2  # output rounding alone is about 0.6u
    if not values["addmm_rel_error"] < limit:
        return FAIL, values, f"hipBLASLt bf16 addmm relative error {values['addmm_rel_error']:.3g} >= {limit:.3g}"
    return PASS, values, ""


def hipblaslt(ctx: ProbeContext) -> dict:
    values: dict = {"TORCH_BLAS_PREFER_HIPBLASLT": os.environ.get("TORCH_BLAS_PREFER_HIPBLASLT")}
    if not ctx.on_gpu or not is_rocm():
        return result("hipblaslt", SKIP, values, "not a ROCm GPU: hipBLASLt is not used")
    choose = getattr(torch.backends.cuda, "preferred_blas_library", None)
    if choose is None:
        return result("hipblaslt", SKIP, values, "torch.backends.cuda.preferred_blas_library is absent in this torch")
    status, measured, message = lt_gemm_check(ctx.device, choose)
    return result("hipblaslt", status, {**values, **measured}, message)
