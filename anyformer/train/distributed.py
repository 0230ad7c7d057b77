"""Data-parallel training with PyTorch's own engine: torchrun sets RANK/WORLD_SIZE, we join the
group (gloo on CPU, NCCL on CUDA), wrap the model in DDP, and each rank takes its share of the
global batch. Without torchrun every method is a cheap no-op."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn


@dataclass
class Distributed:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device | None = None

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls, device: str = "auto") -> "Distributed":
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls()
        rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        use_cuda = device in ("auto", "cuda") and torch.cuda.is_available()
        if use_cuda:
            torch.cuda.set_device(local)
        if not dist.is_initialized():
            dist.init_process_group("nccl" if use_cuda else "gloo")
        return cls(rank, world, local, torch.device("cuda", local) if use_cuda else torch.device("cpu"))

    def wrap(self, model: nn.Module) -> nn.Module:
        if not self.enabled:
            return model
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(model, device_ids=[self.local_rank] if self.device.type == "cuda" else None)

    def sum(self, t: Tensor) -> Tensor:
        if self.enabled:
            t = t.clone()
            dist.all_reduce(t)
        return t

    def mean(self, t: Tensor) -> float:
        return float(self.sum(t.detach().float())) / self.world

    def shard(self, n: int) -> range:
        """This rank's contiguous slice of n evaluation examples."""
        per = -(-n // self.world)
        return range(min(n, self.rank * per), min(n, (self.rank + 1) * per))

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def close(self) -> None:
        if self.enabled and dist.is_initialized():
            dist.destroy_process_group()
