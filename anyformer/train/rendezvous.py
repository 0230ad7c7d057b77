"""The store a process group is built on, under torchrun: a namespace of the agents' store that
belongs to this start of the workers alone.

With the c10d rendezvous, torchrun's agents keep one key-value store for the whole job and hand it
to every start of the workers (TORCHELASTIC_USE_AGENT_STORE=True), but PyTorch writes a process
group's keys into it unprefixed. After an elastic restart the new workers then read the dead ones'
addresses: gloo fails with "connectFullMesh failed ... Connection refused" and the job spends its
restarts, then hangs (pytorch/pytorch#135712, #167288). Its restart count cannot tell starts apart,
since agents count restarts differently. So the ranks agree on a fresh prefix for this start:

- rank 0 posts a new random token (`ping`);
- every other rank reads the ping, registers a nonce of its own process under it, and counts
  itself in;
- once all have counted in under rank 0's token, rank 0 posts the nonces it heard (`go`);
- a rank accepts a `go` only if it names its own nonce: a previous start's keys, which may still
  be read before rank 0 posts its token, can never name a process that did not exist then.

A rank that read an old ping registers under it (harmless) and joins the new one when it appears.
Rank 0 also counts the starts in the store, and posts the count with `go`: every rank learns how
many starts came before this one, which TORCHELASTIC_RESTART_COUNT does not say (an agent whose
workers were stopped because another node's failed does not count that restart).
"""
from __future__ import annotations

import json
import os
import time
import uuid
from datetime import timedelta

from torch.distributed import PrefixStore, Store, TCPStore

ROOT = "anyformer/start"
POLL_S = 0.02


def shared_store() -> bool:
    """Whether torchrun handed the workers its agents' store (c10d rendezvous, by default)."""
    return os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def fresh_store(rank: int, world: int, timeout: timedelta = timedelta(minutes=30)) -> tuple[Store, int]:
    """The agents' store (MASTER_ADDR:MASTER_PORT) under a prefix all `world` ranks agree on, and
    how many starts of the workers came before this one (0: the first)."""
    base = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size=world,
                    is_master=False, timeout=timeout)
    token, before = _lead(base, world, timeout) if rank == 0 else _follow(base, rank, timeout)
    return PrefixStore(f"{ROOT}/{token}/", base), before


def _lead(store: Store, world: int, timeout: timedelta) -> tuple[str, int]:
    token = uuid.uuid4().hex
    before = store.add(f"{ROOT}/starts", 1) - 1
    store.set(f"{ROOT}/ping", token)
    deadline = time.monotonic() + timeout.total_seconds()
    while store.add(f"{ROOT}/{token}/joined", 0) < world - 1:
        _wait(deadline, "the other ranks to join")
    keys = [f"{ROOT}/{token}/nonce/{r}" for r in range(1, world)]
    nonces = {str(r): v.decode() for r, v in zip(range(1, world), store.multi_get(keys))} if keys else {}
    store.set(f"{ROOT}/{token}/go", json.dumps({"before": before, "nonces": nonces}))
    return token, before


def _follow(store: Store, rank: int, timeout: timedelta) -> tuple[str, int]:
    nonce, joined = uuid.uuid4().hex, set()
    deadline = time.monotonic() + timeout.total_seconds()
    while True:
        if store.check([f"{ROOT}/ping"]):
            token = store.get(f"{ROOT}/ping").decode()
            if token not in joined:  # the nonce first: rank 0 reads it once the count is complete
                store.set(f"{ROOT}/{token}/nonce/{rank}", nonce)
                store.add(f"{ROOT}/{token}/joined", 1)
                joined.add(token)
            if store.check([f"{ROOT}/{token}/go"]):
                go = json.loads(store.get(f"{ROOT}/{token}/go"))
                if go["nonces"].get(str(rank)) == nonce:
                    return token, int(go["before"])
        _wait(deadline, "rank 0")


def _wait(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(f"waited for {what} in torchrun's store at {os.environ.get('MASTER_ADDR')}:"
                           f"{os.environ.get('MASTER_PORT')} and gave up: a rank of this start did not come")
    time.sleep(POLL_S)
