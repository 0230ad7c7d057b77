"""torchrun's elastic restarts across machines, on this host: two agents as two nodes (c10d
rendezvous, gloo, one worker each) run `train --resume auto`; a worker of node 1 is killed with
SIGKILL after the first checkpoint, and again during a checkpoint's write; both agents exit 0 and
the weights are bit-identical to the same two-node job never interrupted. And the pieces that make
it so, without a second process: each start's own namespace of torchrun's store, a repeated signal
under torchrun, a checkpoint named only once whole, ranks that would train different runs."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from anyformer.train import rendezvous
from anyformer.train.checkpoint import commit_checkpoint, list_checkpoints, load_checkpoint, stage_checkpoint
from anyformer.train.distributed import Distributed
from anyformer.train.elastic import check_same_run, lost_rank
from anyformer.train.signals import StopSignals
from tests.conftest import REPO, SHARED_DATA

ARGS = ["train", "--model", "vit-mnist", "--set", "width=32", "--set", "depth=1", "--set", "heads=2",
        "--set", "mlp_hidden=64", "--set", "patch_size=7", "--set", "dropout=0.1", "--augment", "digits",
        "--max-steps", "12", "--checkpoint-every", "3", "--eval-every", "12", "--limit-train", "384",
        "--limit-eval", "100", "--batch-size", "32", "--amp", "none", "--threads", "1", "--no-progress",
        "--no-plots", "--resume", "auto"]
# A worker that holds the step-9 checkpoint half-written for a few seconds, so that a kill lands in the write.
SLOW_WORKER = REPO / "benchmarks" / "elastic_worker.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_nodes(out: Path, logs: Path, **extra: str) -> list[subprocess.Popen]:
    """`torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --max-restarts=2`, twice: two nodes."""
    env = {**os.environ, "ANYFORMER_DATA": str(SHARED_DATA), "PYTHONUNBUFFERED": "1", **extra}
    env.pop("ANYFORMER_DEBUG", None)
    target = [str(SLOW_WORKER)] if "ANYFORMER_SLOW_WRITE" in extra else ["-m", "anyformer"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--max-restarts=2", *target, *ARGS, "--out", str(out)]
    agents = []
    for node in (0, 1):
        with open(logs / f"node{node}.log", "w") as f:
            agents.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT))
    return agents


def worker_of_rank(agents: list[subprocess.Popen], rank: int) -> int:
    """The pid of the worker holding `rank` (an agent's child whose RANK is `rank`)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
                env = (stat.parent / "environ").read_bytes().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            if ppid in {a.pid for a in agents} and f"RANK={rank}".encode() in env:
                return int(stat.parent.name)
        time.sleep(0.05)
    raise TimeoutError(f"no worker of rank {rank}")


def wait_for(path: Path, agents: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + 300
    while not path.exists():
        assert all(a.poll() is None for a in agents) and time.monotonic() < deadline, f"no {path}"
        time.sleep(0.005)


def finish(agents: list[subprocess.Popen], logs: Path) -> str:
    codes = [a.wait(timeout=600) for a in agents]
    log = "\n".join((logs / f"node{n}.log").read_text() for n in (0, 1))
    assert codes == [0, 0], log[-5000:]
    return log


@pytest.mark.slow
def test_two_nodes_restarted_after_kills_end_bit_identical_to_an_uninterrupted_job(tmp_path):
    """One job, two restarts: rank 1 (node 1's worker) killed right after the first checkpoint
    (step 3), then, in the restarted job, while rank 0 holds the step-9 checkpoint half-written."""
    ref_logs, cut_logs = tmp_path / "ref-logs", tmp_path / "cut-logs"
    ref_logs.mkdir(), cut_logs.mkdir()
    finish(two_nodes(tmp_path / "ref", ref_logs), ref_logs)

    out, flag = tmp_path / "cut", tmp_path / "writing"
    agents = two_nodes(out, cut_logs, ANYFORMER_SLOW_WRITE=f"9:2:{flag}")
    rank1 = worker_of_rank(agents, 1)
    wait_for(out / "checkpoints" / "step-000000003.pt", agents)
    os.kill(rank1, signal.SIGKILL)
    wait_for(flag, agents)  # restarted, resumed from step 3, and rank 0 is half-way through step 9's write
    half = [p for p in (out / "checkpoints").iterdir() if p.name.startswith(".step-000000009.pt.")]
    assert half and not (out / "checkpoints" / "step-000000009.pt").exists()
    os.kill(worker_of_rank(agents, 1), signal.SIGKILL)
    log = finish(agents, cut_logs)

    assert_same_weights(tmp_path / "ref", out)
    ckpts = out / "checkpoints"
    assert f"resumed from {ckpts / 'step-000000003.pt'} at step 3/12" in log, log
    assert f"resumed from {ckpts / 'step-000000006.pt'} at step 6/12" in log, log  # not the half-written 9
    assert log.count("restart 1 (torchrun --max-restarts 2)") == 2 and log.count("restart 2 (") == 2, log
    assert not [p for p in ckpts.iterdir() if p.name.startswith(".")], "a temporary file is left"
    assert json.loads((out / "summary.json").read_text())["resumed"] is True


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_each_start_of_the_workers_agrees_on_a_namespace_of_its_own(monkeypatch):
    """An earlier start left its ping, its go and its ranks' nonces in the agents' store (torchrun
    keeps it across restarts); a rank of the new start that reads them before the new rank 0 posts
    must still end in the new start's namespace, with every other rank."""
    server = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(server.port))
    old = "0" * 32  # what a finished earlier start of three ranks left
    server.add(f"{rendezvous.ROOT}/starts", 1)
    server.set(f"{rendezvous.ROOT}/ping", old)
    server.set(f"{rendezvous.ROOT}/{old}/go", json.dumps({"before": 0, "nonces": {"1": "a", "2": "b"}}))
    got: dict[int, tuple] = {}

    def rank(r: int) -> None:
        store, before = rendezvous.fresh_store(r, 3, timeout=timedelta(seconds=20))
        store.set(f"hello/{r}", str(r))
        got[r] = (before, sorted(store.get(f"hello/{k}").decode() for k in range(3)))
    threads = [threading.Thread(target=rank, args=(r,)) for r in (1, 2)]
    for t in threads:
        t.start()
    time.sleep(0.3)  # ranks 1 and 2 have read the old ping by now
    rank(0)
    for t in threads:
        t.join(timeout=20)
    assert got == {r: (1, ["0", "1", "2"]) for r in range(3)}  # one start came before; the same namespace


def test_under_torchrun_a_second_signal_is_the_same_request():
    """A preempted job's scheduler signals every process, and torchrun's agent forwards its own
    signal too: a worker must still write its checkpoint, not stop at once."""
    with StopSignals(escalate=False) as s:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert s.received == signal.SIGTERM
    with pytest.raises(KeyboardInterrupt):
        with StopSignals() as s:  # one process: a second signal stops at once
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)


def test_a_checkpoint_is_named_only_once_committed(tmp_path):
    state = {"step": 3, "model": {"w": torch.arange(6.0)}}
    tmp, size = stage_checkpoint(tmp_path, 3, state)
    assert Path(tmp).stat().st_size == size and Path(tmp).name.startswith(".step-000000003.pt.")
    assert list_checkpoints(tmp_path) == []  # staged: no rank reads it yet
    path = commit_checkpoint(tmp_path, 3, tmp, keep=2)
    assert list_checkpoints(tmp_path) == [path] and not Path(tmp).exists()
    assert torch.equal(load_checkpoint(path)["model"]["w"], torch.arange(6.0))


class _Ranks(Distributed):
    """Rank `rank` of a group whose ranks hold `settings[r]`: broadcast and all_gather answered
    from them, as the collectives would."""

    def __init__(self, rank: int, settings: list[dict]) -> None:
        super().__init__(rank=rank, world=len(settings), joined=True)
        self.all = settings

    def broadcast(self, obj):
        return json.loads(json.dumps(self.all[0], sort_keys=True))

    def all_gather(self, obj):
        return [_Ranks.report(r, self.all) for r in range(self.world)]

    @staticmethod
    def report(r: int, all_settings: list[dict]):
        mine, theirs = all_settings[r], all_settings[0]
        differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        return (differ[0], mine.get(differ[0]), theirs.get(differ[0])) if differ else None


def test_ranks_that_would_train_different_runs_stop_together():
    same = {"out": "/shared/run", "resume": True, "lr": 0.001}
    check_same_run(_Ranks(0, [same, same]), same)
    blind = {**same, "resume": False}  # node 1 sees no run: --out on its own disk
    with pytest.raises(ValueError, match=r"rank 1 would train other settings than rank 0 \(rank 1: resume=false, "
                                         r"rank 0: resume=true\): every machine must run the same command"):
        check_same_run(_Ranks(1, [same, blind]), blind)


def test_a_lost_rank_is_one_line_and_other_errors_are_left_alone():
    gloo = RuntimeError("[third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:41640: "
                        "Connection reset by peer.")
    assert lost_rank(gloo).startswith("another rank of the job stopped (RuntimeError: [third_party/gloo")
    assert lost_rank(torch.distributed.DistNetworkError("timed out")) is not None
    assert lost_rank(RuntimeError("shape mismatch")) is None


def test_a_run_directory_another_rank_cannot_see_stops_at_the_first_checkpoint(tmp_path, mnist_slice):
    """--out on each machine's own disk: rank 1 does not see the file rank 0 staged. The run stops
    in one line at its first checkpoint, and no step-N.pt (nor the staged file) is left."""
    from anyformer.train import checkpoint
    from anyformer.train.rundir import TrainingError
    from .conftest import make_trainer, tiny_config

    class Blind(Distributed):  # rank 0 of two, whose rank 1 answers that it cannot see the file
        def all_gather(self, obj):
            return [obj, False]
    trainer = make_trainer(tiny_config(tmp_path, max_steps=2), mnist_slice)
    trainer.files.prepare(False)
    trainer.train_step()
    trainer.dist = trainer.files.dist = Blind()
    with pytest.raises(TrainingError, match=r"rank 1 cannot see the checkpoint rank 0 wrote \(.*\.step-000000001\.pt\."
                                            r".*, \d+ bytes\): under torchrun --out must be a folder every machine sees"):
        checkpoint.save(trainer)
    assert list((tmp_path / "run" / "checkpoints").iterdir()) == []
