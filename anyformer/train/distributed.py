"""Data-parallel training with PyTorch's own engine: torchrun sets RANK/WORLD_SIZE, we join the
group (gloo on CPU, NCCL on CUDA), wrap the model in DDP (or shard it with FSDP2), and each rank
takes its share of the global batch. Without torchrun every method is a cheap no-op.

State always travels as full, unsharded dicts keyed by parameter name (torch's distributed
state-dict API), so a checkpoint written by one process, by DDP or by FSDP resumes under any of them.
"""
from __future__ import annotations

import os
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from . import rendezvous


@dataclass
class Distributed:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1
    device: torch.device | None = None
    fsdp: bool = False

    joined: bool = False  # a process group is joined (torchrun), perhaps of one process
    restarts: int = 0     # how many times torchrun had started this job's workers before (elastic restarts)

    @property
    def enabled(self) -> bool:
        return self.joined

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls, device: torch.device = torch.device("cpu"), fsdp: bool = False) -> "Distributed":
        """Join torchrun's group if there is one; `device` is the kind asked for (cpu or cuda)."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1 and "RANK" not in os.environ:
            return cls(device=device)  # not under torchrun
        # Under torchrun a group is joined even for one process (`--nproc_per_node=1`): DDP and FSDP2
        # then run over one rank, which is how one GPU checks the engine and its NCCL set-up.
        rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        if device.type == "cuda":
            device = torch.device("cuda", local)  # one GPU per local rank
            torch.cuda.set_device(device)
        restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
        if not dist.is_initialized():
            backend = "nccl" if device.type == "cuda" else "gloo"
            if rendezvous.shared_store():  # torchrun's c10d store outlives a start: a namespace of this one's own
                store, restarts = rendezvous.fresh_store(rank, world)
                dist.init_process_group(backend, store=store, rank=rank, world_size=world)
            else:  # each agent counts only its own workers' failures: the most any counted
                dist.init_process_group(backend)
                counts: list[Any] = [None] * world
                dist.all_gather_object(counts, restarts)
                restarts = max(counts)
        return cls(rank, world, local, local_world, device, fsdp, joined=True, restarts=restarts)

    def wrap(self, model: nn.Module) -> nn.Module:
        """DDP: a wrapper that all-reduces gradients. FSDP: shards `model` in place, block by block."""
        if not self.enabled:
            return model
        if self.fsdp:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard
            mesh = init_device_mesh(self.device.type, (self.world,))
            # One unit per block: only one block's full weights are gathered at a time.
            for block in getattr(getattr(model, "backbone", None), "blocks", []):
                fully_shard(block, mesh=mesh)
            return fully_shard(model, mesh=mesh)
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(model, device_ids=[self.local_rank] if self.device.type == "cuda" else None)

    def grad_sync(self, model: nn.Module, sync: bool):
        """Skip the gradient all-reduce on all but the last accumulated chunk."""
        if not self.enabled:
            return nullcontext()
        if self.fsdp:
            model.set_requires_gradient_sync(sync)
            return nullcontext()
        return nullcontext() if sync else model.no_sync()

    @contextmanager
    def gathered(self, model: nn.Module):
        """Full weights on every rank for the duration, so ranks may run different numbers of
        forwards (evaluation shards differ by a batch; rank 0 alone draws attention maps)."""
        if not (self.enabled and self.fsdp):
            yield
            return
        from torch.distributed.fsdp import FSDPModule
        units = [m for m in model.modules() if isinstance(m, FSDPModule)]
        model.set_reshard_after_forward(False)
        for m in units:  # every rank, same order: the all-gathers pair up
            m.unshard()
        try:
            yield
        finally:
            for m in units:  # reshard is per unit, not recursive
                m.reshard()
            model.set_reshard_after_forward(True)

    def state(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None):
        """Full model (and optimiser) state on rank 0, on the CPU; collective under FSDP."""
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                             get_state_dict)
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        if optimizer is None:
            return get_model_state_dict(model, options=options)
        return get_state_dict(model, optimizer, options=options)

    def load_state(self, model: nn.Module, optimizer: torch.optim.Optimizer,
                   model_state: dict[str, Any], optim_state: dict[str, Any]) -> None:
        """Every rank passes the same full state; FSDP keeps its own shard of it."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict
        set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state,
                       options=StateDictOptions(full_state_dict=True))

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

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's `obj`, in rank order, on rank 0 (None elsewhere)."""
        if not self.enabled:
            return [obj]
        out = [None] * self.world if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order, on every rank."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def close(self, wait: bool = True) -> None:
        if self.enabled and dist.is_initialized():
            if wait:  # leave together: a rank that exits while another still talks to it can abort both
                dist.barrier()
            dist.destroy_process_group()
