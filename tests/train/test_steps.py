"""The step: losses stay on the device and are read at syncs only, a non-finite loss is still
named by its step, signals stop every rank after the same step, and half precision is either
scaled (fp16, CUDA) or refused (fp16 on a CPU)."""
import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from anyformer import plan
from anyformer.train import Interrupted, Trainer, TrainingError
from anyformer.train import trainer as trainer_module
from anyformer.train.precision import check_amp, make_scaler
from tests.conftest import REPO, SHARED_DATA

from .conftest import assert_same_checkpoints, assert_same_weights, interrupt_at, make_trainer, tiny_config


class HostReads:
    """Makes every read of a tensor's value by the host raise while `armed`."""

    NAMES = ("item", "tolist", "__float__", "__int__", "__bool__", "numpy", "cpu")

    def __init__(self, monkeypatch):
        self.armed = False
        for name in self.NAMES:
            real = getattr(torch.Tensor, name)

            def guard(t, *a, _real=real, _name=name, **kw):
                if self.armed and t.device.type != "meta":
                    raise AssertionError(f"the host read a tensor (Tensor.{_name}) inside a training step")
                return _real(t, *a, **kw)
            monkeypatch.setattr(torch.Tensor, name, guard)


@pytest.mark.slow
def test_a_training_step_never_reads_a_value_back_to_the_host(tmp_path, mnist_slice, monkeypatch):
    """Reads happen at syncs: the first step, then about every SYNC_SECONDS (here: never), and at
    each evaluation and checkpoint; the sums read there are those of every step."""
    monkeypatch.setattr(trainer_module, "SYNC_SECONDS", 1e9)
    # torch's foreach AdamW reads its step count with .item() (the fused one does not): the trainer's
    # own code is under test here, so the optimiser that does not read is forced.
    with plan.forcing("stock,adamw=fused"):  # chosen when the optimiser is made
        trainer = make_trainer(tiny_config(tmp_path, max_steps=20, eval_every=10, grad_clip=1.0,
                                           augment="digits", grad_accum=2), mnist_slice)
    reads, real_step, real_sync = HostReads(monkeypatch), trainer.train_step, trainer.sync
    synced_at = []

    def step():
        reads.armed = True
        try:
            real_step()
        finally:
            reads.armed = False

    def sync():
        synced_at.append(trainer.step)
        real_sync()
    trainer.train_step, trainer.sync = step, sync
    trainer.run()
    assert synced_at == [1, 10, 20]
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [10, 20]
    assert all(0 < m["train_loss"] < 3 and 0 <= m["train_accuracy"] <= 1 for m in lines)


@pytest.mark.slow
def test_syncs_follow_the_clock(tmp_path, mnist_slice, monkeypatch):
    """With SYNC_SECONDS = 0 every step is read (the progress bar stays current)."""
    monkeypatch.setattr(trainer_module, "SYNC_SECONDS", 0.0)
    trainer = make_trainer(tiny_config(tmp_path, max_steps=6, eval_every=6), mnist_slice)
    real_sync, synced_at = trainer.sync, []

    def sync():
        synced_at.append(trainer.step)
        real_sync()
    trainer.sync = sync
    trainer.run()
    assert synced_at == [1, 2, 3, 4, 5, 6]


def test_a_non_finite_loss_read_late_still_names_its_step_and_writes_nothing_after_it(tmp_path, mnist_slice,
                                                                                      monkeypatch):
    monkeypatch.setattr(trainer_module, "SYNC_SECONDS", 1e9)  # the NaN of step 8 is read at step 10
    trainer = make_trainer(tiny_config(tmp_path, max_steps=20, eval_every=10, checkpoint_every=5), mnist_slice)
    real_loss = trainer.task.loss

    def loss_that_breaks(model, batch):
        loss, stats = real_loss(model, batch)
        return (loss * float("inf") if trainer.step == 7 else loss), stats
    trainer.task.loss = loss_that_breaks
    with pytest.raises(TrainingError, match=r"the loss became (nan|inf) at step 8; stopping"):
        trainer.run()
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-000000005.pt"]
    assert not (tmp_path / "run" / "metrics.jsonl").exists(), "no evaluation of the broken weights was written"


# ------------------------------------------------------------------------------- precision
def test_fp16_on_a_cpu_is_refused_before_any_data_is_read(tmp_path):
    message = r"--amp fp16 needs a CUDA device .* use --amp bf16, the cpu's half type, or --amp none"
    with pytest.raises(ValueError, match=message):
        Trainer(tiny_config(tmp_path, amp="fp16", device="cpu", data=str(tmp_path / "no-such-data")))
    with pytest.raises(ValueError, match=message):
        check_amp("fp16", torch.device("cpu"))
    for amp in ("none", "bf16", "auto"):
        assert make_scaler(amp, torch.device("cpu")) is None


def scaled(trainer):
    """The fp16 path's loss scaling, run on the CPU in fp32: a power-of-two scale is exact there, so
    the weights must equal those of an unscaled run bit for bit if the gradients are unscaled
    before clipping and the update."""
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12, growth_interval=5)
    return trainer


@pytest.mark.slow
def test_loss_scaling_unscales_before_clipping_and_resumes_exactly(tmp_path, mnist_slice):
    kw = dict(max_steps=16, eval_every=8, grad_clip=0.5, augment="digits")
    make_trainer(tiny_config(tmp_path / "plain", **kw), mnist_slice).run()
    full = scaled(make_trainer(tiny_config(tmp_path / "a", **kw), mnist_slice))
    full.run()
    assert full.scaler.get_scale() == 2.0 ** 15, "the scale grew every 5 clean steps"
    assert_same_weights(tmp_path / "plain" / "run", tmp_path / "a" / "run")
    cut = scaled(make_trainer(tiny_config(tmp_path / "b", **kw), mnist_slice))
    interrupt_at(cut, 7)
    with pytest.raises(Interrupted, match="after step 7"):
        cut.run()
    resumed = scaled(make_trainer(tiny_config(tmp_path / "b", resume=True, **kw), mnist_slice))
    resumed.run()
    assert resumed.scaler.get_scale() == 2.0 ** 15, "the scaler's state came back from the checkpoint"
    assert_same_weights(tmp_path / "a" / "run", tmp_path / "b" / "run")
    assert_same_checkpoints(tmp_path / "a" / "run", tmp_path / "b" / "run")


# ------------------------------------------------------------------------------- torchrun
STOP_SCRIPT = """
import os, signal, sys
from anyformer.data import load_image_dataset
from anyformer.train import Interrupted
from tests.train.conftest import make_trainer, tiny_config
data = os.environ["ANYFORMER_SHARED_DATA"] + "/mnist"
slice_ = (load_image_dataset(data, "train"), load_image_dataset(data, "test"))
trainer = make_trainer(tiny_config(__import__("pathlib").Path(sys.argv[1]), max_steps=400, eval_every=400,
                                   limit_train=640, limit_eval=100), slice_)
real = trainer.train_step
def step():
    real()
    if trainer.dist.rank == 1 and trainer.step == 5:  # only rank 1 is told to stop
        os.kill(os.getpid(), signal.SIGTERM)
trainer.train_step = step
try:
    trainer.run()
except Interrupted as e:
    sys.stdout.flush()  # one write of the whole line: the ranks share the pipe, and print's separate
    os.write(1, f"rank {trainer.dist.rank}: {e}\\n".encode())  # writes of text and newline interleaved
"""


@pytest.mark.slow
def test_a_signal_on_one_rank_stops_every_rank_after_the_same_step(tmp_path):
    script = tmp_path / "stop.py"
    script.write_text(STOP_SCRIPT)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "ANYFORMER_SHARED_DATA": str(SHARED_DATA), "ANYFORMER_DATA": str(SHARED_DATA),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}",
                        str(script), str(tmp_path)], capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    said = sorted(line for line in r.stdout.splitlines() if line.startswith("rank "))
    assert len(said) == 2, r.stdout
    steps = {int(line.split("after step ")[1].split(";")[0]) for line in said}
    assert len(steps) == 1, f"the ranks stopped after different steps: {said}"
    stopped = steps.pop()
    assert 5 <= stopped < 400, said
    assert said[0].startswith("rank 0: stopped by signal SIGTERM") and "step-" in said[0]
    assert said[1].startswith("rank 1: stopped by signal SIGTERM") and "rank 0 wrote the checkpoint" in said[1]
    assert (tmp_path / "run" / "checkpoints" / f"step-{stopped:09d}.pt").is_file()
    assert not (tmp_path / "run" / "summary.json").exists()


def test_a_precision_settled_elsewhere_is_taken_without_measuring(monkeypatch):
    """Under torchrun every rank takes rank 0's `auto` precision: the others measure nothing."""
    from anyformer.train import precision
    monkeypatch.setattr(precision, "_SETTLED", {})
    monkeypatch.setattr(precision, "amp_dtype", lambda *a, **k: pytest.fail("measured on a rank that was told"))
    cpu = torch.device("cpu")
    assert precision.settle_amp("auto", cpu, width=8, hidden=32, decided="bf16") == "bf16"
    assert precision.resolve_amp("auto", cpu) == "bf16"
    assert precision.settle_amp("none", cpu, width=8, hidden=32, decided="bf16") == "none"  # asked for: kept


def test_under_torchrun_rank_0_plans_the_step_and_the_others_read_its_answers(tmp_path, mnist_slice, monkeypatch):
    """A stand-in for a 2-process group (no collectives run: the barrier, broadcast and all_gather
    are the group's, stood in for): rank 0 measures the training step's kernel choices and AdamW's
    before the model is wrapped; rank 1 then answers the same choices from what rank 0 broadcast
    (on another machine its own plan file holds none of them), measuring none."""
    from anyformer.plan import Planner, using
    from anyformer.plan.timing import Measurement
    from anyformer.train.distributed import Distributed

    def table(runs, budget_s):  # every candidate as fast as the stock one: stock stays
        times = {n: 1.0 for n in runs}
        return Measurement(times=times, errors={}, rounds=1)

    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ANYFORMER_PLAN", raising=False)
    monkeypatch.setattr(Distributed, "barrier", lambda self: None)
    sent: list = []  # what rank 0 broadcast, in order: rank 1 receives the same

    def broadcast(self, obj):
        if self.rank == 0:
            sent.append(obj)
            return obj
        return sent.pop(0)
    monkeypatch.setattr(Distributed, "broadcast", broadcast)
    monkeypatch.setattr(Distributed, "all_gather", lambda self, obj: [obj] * self.world)
    monkeypatch.setattr(Distributed, "wrap", lambda self, model: model)
    cfg = tiny_config(tmp_path, amp="none", compile=False)
    trained = {}
    for rank in (0, 1):
        monkeypatch.setattr(Distributed, "from_env", classmethod(lambda cls, device, fsdp=False, r=rank:
                                                                 cls(r, 2, r, 2, device, fsdp, joined=True)))
        with using(Planner(timer=table)) as p:
            trainer = make_trainer(cfg, mnist_slice)
            if rank == 1:  # the step's own forward and backward, as training would take it
                batch, _ = trainer.task.batch(0, 1, 2)
                trainer.task.loss(trainer.model, batch)[0].backward()
            trained[rank] = list(p.measured)
    assert any("training=1" in k for k in trained[0]) and any(k.startswith("adamw") for k in trained[0])
    assert not any("training=1" in k or k.startswith("adamw") for k in trained[1]), trained[1]
