"""torch.distributed probes: a world-size-1 smoke test and a multi-rank correctness/bandwidth test.

collective_smoke: all_reduce through the device's backend (nccl on GPU, which is RCCL on
ROCm; gloo on CPU). If the caller has no process group, one of world size 1 is created on a
temporary file:// store and destroyed afterwards; an existing group is used as it is.

multi_rank_collective (skip unless a group of world size > 1 exists): all_reduce and
broadcast correctness, then the bus bandwidth of all_reduce on a ~64 MB fp32 tensor, with
nccl-tests' definition busbw = size / time · 2(n-1)/n. Every step runs in a helper thread
with a deadline, so a dead or stuck peer gives "fail" instead of a hang.
"""

from __future__ import annotations

import datetime
import os
import tempfile
import threading
import time
from typing import Callable

import torch
import torch.distributed as dist

from ._common import FAIL, PASS, SKIP, ProbeContext, result, synchronize

BANDWIDTH_BYTES = 64 * 2**20
TIMEOUT_S = 60.0


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def _collective_device(device: torch.device) -> torch.device:
    """The tensor device for this process's collectives: its own GPU under nccl."""
    if device.type != "cuda":
        return device
    return torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())


def run_with_deadline(fn: Callable[[], object], timeout_s: float) -> object:
    """fn() in a daemon thread; TimeoutError if it has not returned after timeout_s."""
    outcome: dict = {}

    def target():
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=target, daemon=True, name="probe-collective")
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise TimeoutError(f"no answer from the peers within {timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _all_reduce_check(device: torch.device) -> dict:
    """Every rank contributes rank+1; the sum must be n(n+1)/2 everywhere."""
    n, rank = dist.get_world_size(), dist.get_rank()
    t = torch.full((1024,), float(rank + 1), device=device)
    dist.all_reduce(t)
    synchronize(device)
    expected = n * (n + 1) / 2
    return {"world_size": n, "all_reduce_expected": expected, "all_reduce_max_error": float((t - expected).abs().max())}


def _nccl_version() -> str | None:
    """NCCL's (RCCL's on ROCm) version as torch reports it: a tuple in recent torch, an int before."""
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # torch built without NCCL
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def collective_smoke(ctx: ProbeContext, timeout_s: float = TIMEOUT_S) -> dict:
    device = _collective_device(ctx.device)
    values: dict = {"backend": backend_for(device)}
    if device.type == "cuda":
        values["nccl_version"] = _nccl_version()
    created = False
    store_dir = None
    try:
        if dist.is_available() and dist.is_initialized():
            values["backend"] = dist.get_backend()
            values["group"] = "existing"
        else:
            if not dist.is_available():
                return result("collective_smoke", SKIP, values, "torch.distributed is not available in this build")
            store_dir = tempfile.mkdtemp(prefix="envbuild-probe-")
            dist.init_process_group(
                backend=values["backend"],
                init_method="file://" + os.path.join(store_dir, "store"),
                world_size=1,
                rank=0,
                timeout=datetime.timedelta(seconds=timeout_s),
            )
            created = True
            values["group"] = "created"
        values.update(run_with_deadline(lambda: _all_reduce_check(device), timeout_s))
    finally:
        if created:
            dist.destroy_process_group()
        if store_dir:
            for name in os.listdir(store_dir):
                os.remove(os.path.join(store_dir, name))
            os.rmdir(store_dir)
    ok = values["all_reduce_max_error"] == 0.0
    return result(
        "collective_smoke",
        PASS if ok else FAIL,
        values,
        "" if ok else f"all_reduce returned a wrong sum (max error {values['all_reduce_max_error']})",
    )


def _broadcast_check(device: torch.device) -> dict:
    src_values = torch.arange(4096, dtype=torch.float32, device=device) * 0.5 + 7
    t = src_values.clone() if dist.get_rank() == 0 else torch.zeros_like(src_values)
    dist.broadcast(t, src=0)
    synchronize(device)
    return {"broadcast_max_error": float((t - src_values).abs().max())}


def _bandwidth(device: torch.device, size_bytes: int, iterations: int) -> dict:
    n = dist.get_world_size()
    t = torch.ones(size_bytes // 4, dtype=torch.float32, device=device)
    dist.all_reduce(t)  # warm-up (connection set-up, algorithm choice); it also lines the ranks up
    synchronize(device)
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(t)
    synchronize(device)
    elapsed = (time.perf_counter() - start) / iterations
    algbw = t.numel() * 4 / elapsed / 1e9
    return {
        "bandwidth_bytes": t.numel() * 4,
        "bandwidth_iterations": iterations,
        "all_reduce_time_s": elapsed,
        "algbw_gb_s": algbw,
        "busbw_gb_s": algbw * 2 * (n - 1) / n,
    }


def multi_rank_collective(
    ctx: ProbeContext,
    size_bytes: int = BANDWIDTH_BYTES,
    iterations: int = 5,
    timeout_s: float = TIMEOUT_S,
) -> dict:
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return result("multi_rank_collective", SKIP, {}, "not part of a torch.distributed group of world size > 1")
    device = _collective_device(ctx.device)
    values: dict = {"backend": dist.get_backend(), "rank": dist.get_rank(), "timeout_s": timeout_s}
    try:
        values.update(run_with_deadline(lambda: _all_reduce_check(device), timeout_s))
        values.update(run_with_deadline(lambda: _broadcast_check(device), timeout_s))
        if values["all_reduce_max_error"] or values["broadcast_max_error"]:
            return result("multi_rank_collective", FAIL, values, "collective returned wrong values")
        values.update(run_with_deadline(lambda: _bandwidth(device, size_bytes, iterations), timeout_s))
    except TimeoutError as exc:
        return result(
            "multi_rank_collective",
            FAIL,
            values,
            f"{exc}: a peer is dead or stuck (on multi-GPU ROCm hosts check iommu=pt, ROCm/rccl#1129); "
            "this process group should not be used further",
        )
    return result("multi_rank_collective", PASS, values)
