"""Data parallelism under torchrun (WORLD_SIZE > 1): nccl on GPUs (RCCL on ROCm), gloo on CPU."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch

#: Seconds a rank waits for the others in a collective before the run fails (`train --dist-timeout`).
DEFAULT_TIMEOUT_S = 300.0


@dataclass
class Dist:
    active: bool = False
    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, model):
        if not self.active:
            return model
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if not self.active:
            return tensor
        import torch.distributed as td

        tensor = tensor.clone()
        td.all_reduce(tensor, op=td.ReduceOp.SUM)
        return tensor

    def all_gather_object(self, obj) -> list:
        """Every rank's `obj`, in rank order (a single process: [obj])."""
        if not self.active:
            return [obj]
        import torch.distributed as td

        gathered = [None] * self.world_size
        td.all_gather_object(gathered, obj)
        return gathered

    def shutdown(self) -> None:
        if self.active:
            import torch.distributed as td

            if td.is_initialized():
                td.destroy_process_group()


def init_from_env(device_name: str = "auto", timeout_s: float | None = None) -> Dist:
    """Join the process group torchrun describes; a single process when WORLD_SIZE is unset or 1.

    Each rank takes GPU LOCAL_RANK (nccl) unless there is no GPU or `device_name` is "cpu" (gloo); a collective
    that waits longer than `timeout_s` (default DEFAULT_TIMEOUT_S) for a rank fails the run."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    import torch.distributed as td

    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    timeout = datetime.timedelta(seconds=timeout_s or DEFAULT_TIMEOUT_S)
    if torch.cuda.is_available() and device_name != "cpu":
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        try:
            td.init_process_group("nccl", timeout=timeout, device_id=device)
        except TypeError:  # torch releases without the device_id argument
            td.init_process_group("nccl", timeout=timeout)
    else:
        device = torch.device("cpu")
        td.init_process_group("gloo", timeout=timeout)
    return Dist(active=True, rank=rank, world_size=world, device=device)
