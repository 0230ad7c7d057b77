"""torchrun's elastic launch as a worker sees it: which node and restart this is (one line each in
the log), that every rank runs the same run, and a lost rank said in one line.

Under `torchrun --nnodes=N --rdzv-backend=c10d --max-restarts=K`, when a worker dies the agents stop
every worker, meet again (a new rendezvous) and start them all afresh; `train --resume auto` then
resumes from the last checkpoint that every rank finished (checkpoint.py). How many starts came
before is `Distributed.restarts` (rendezvous.py). The survivors learn of the loss from their next
collective, which fails; `lost_rank` turns that into one line.
"""
from __future__ import annotations

import json
import os
from typing import Any

import torch.distributed

from .distributed import Distributed


def rendezvous_line(d: Distributed) -> str:
    """'rendezvous: rank 1 of 2, node 1 of 2 (1 process each), store 127.0.0.1:29500, run id job7'."""
    env = os.environ.get
    nodes = f", node {env('GROUP_RANK', '0')} of {env('GROUP_WORLD_SIZE', '1')} ({d.local_world} process" \
            f"{'es' if d.local_world > 1 else ''} each)" if "GROUP_RANK" in os.environ else ""
    store = f", store {env('MASTER_ADDR')}:{env('MASTER_PORT')}" if env("MASTER_ADDR") else ""
    run_id = f", run id {env('TORCHELASTIC_RUN_ID')}" if env("TORCHELASTIC_RUN_ID") else ""
    return f"rendezvous: rank {d.rank} of {d.world}{nodes}{store}{run_id}"


def restart_line(d: Distributed) -> str | None:
    """The line a restarted worker prints (None on the first start)."""
    if d.restarts == 0:
        return None
    most = os.environ.get("TORCHELASTIC_MAX_RESTARTS")
    return (f"restart {d.restarts}{f' (torchrun --max-restarts {most})' if most else ''}: torchrun started every "
            f"worker again (one failed, or a node left or joined); --resume auto continues from the last checkpoint "
            f"that every rank finished")


def announce(d: Distributed) -> None:
    """The rendezvous (and restart) line, once per machine: each node's log says who it is."""
    if not d.enabled or d.local_rank != 0:
        return
    print(rendezvous_line(d), flush=True)
    if (line := restart_line(d)) is not None:
        print(line, flush=True)


def check_same_run(d: Distributed, settings: dict[str, Any]) -> None:
    """Every rank trains the same settings: ranks that read different run directories (--out on
    each machine's own disk, where --resume auto resumes on one and starts afresh on another) or
    were given different flags stop together, naming the ranks and a setting that differs."""
    if not d.enabled:
        return
    mine = json.loads(json.dumps(settings, sort_keys=True, default=str))
    theirs = d.broadcast(mine)
    differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    reports = d.all_gather((differ[0], mine.get(differ[0]), theirs.get(differ[0])) if differ else None)
    bad = [(rank, r) for rank, r in enumerate(reports) if r is not None]
    if bad:
        rank, (key, value, main) = bad[0]
        ranks = ", ".join(str(r) for r, _ in bad)
        raise ValueError(f"rank {ranks} would train other settings than rank 0 (rank {rank}: {key}={json.dumps(value)}"
                         f", rank 0: {key}={json.dumps(main)}): every machine must run the same command on the same "
                         f"--out, a folder they all see")


def lost_rank(e: BaseException) -> str | None:
    """One line for a collective that failed because another rank is gone; None for other errors.
    NCCL's and the store's failures are DistErrors; gloo's a RuntimeError from its transport."""
    if not (isinstance(e, torch.distributed.DistError)
            or isinstance(e, RuntimeError) and "gloo/transport" in str(e)):
        return None
    reason = " ".join(str(e).split())[:200]
    return (f"another rank of the job stopped ({type(e).__name__}: {reason}); under torchrun --max-restarts the "
            f"agents restart every worker, and --resume auto continues from the last complete checkpoint")
