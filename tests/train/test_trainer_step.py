"""One training step of a tiny real trainer: one AdamW step on its global batch (chunks weighted
by their share, an empty one running a stand-in weighted 0), on the compiled module the plan holds
for its inputs, its loss summed in float64, the period's counts and the weight average moved by
the step's number; and the number of steps a run asks."""
from __future__ import annotations

import pytest
import torch

from .conftest import StandInRank, make_trainer, tiny_config


@pytest.mark.parametrize("grad_accum, step", [(1, 0), (4, 62), (8, 62)])
def test_a_step_is_one_adamw_step_on_the_mean_loss_of_its_global_batch(tmp_path, mnist_slice, grad_accum, step) -> None:
    """1,990 examples in batches of 32: step 62 is the epoch's last, of 6 examples, in chunks of 2, 2,
    1 and 1 (grad_accum 4), each weighted by its share of the 6, or six chunks of 1 and two empty ones
    (grad_accum 8, which run a stand-in example weighted 0): the same update as one pass over the
    whole batch, at the schedule's rate for the step; the loss sum and the stats wait on the device,
    the period's steps and images are counted."""
    import copy

    from anyformer.train.optim import lr_at, make_optimizer
    t = make_trainer(tiny_config(tmp_path, grad_accum=grad_accum, warmup_steps=3, grad_clip=0.05, limit_train=1990,
                                 model_overrides={**tiny_config(tmp_path).model_overrides, "dropout": 0.0}),
                     mnist_slice)
    reference = copy.deepcopy(t.model)
    optimizer = make_optimizer(reference, t.cfg)
    for group in optimizer.param_groups:
        group["lr"] = lr_at(step, t.total_steps, t.cfg)
    (x, y), n = t.task.batch(step)
    loss, stats = t.task.loss(reference, (x, y))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.05)
    optimizer.step()
    t.step = step
    t.train_step()
    assert t.step == step + 1 and t.sums == {"steps": 1, "items": n} and n == (32 if step == 0 else 6)
    for (name, a), b in zip(t.model.named_parameters(), reference.parameters()):
        # Adam's first update is about lr * sign(g): a gradient near 0 may flip sign between the two
        # orders of summation (a last-bit difference), moving that weight by far less than 1e-5; a
        # chunk weighted wrongly turns whole gradients and moves weights by about the rate, 3e-3.
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5, msg=name)
    ((pending_step, n_global, keys, sums),) = t.pending
    assert (pending_step, n_global, keys) == (step, n, ["correct", "count"]) and sums.dtype == torch.float64
    torch.testing.assert_close(sums, torch.tensor([loss.item() * n, float(stats["correct"]), float(n)],
                                                  dtype=torch.float64), rtol=1e-5, atol=1e-5)
    assert all(p.grad is None for p in t.model.parameters())  # zeroed for the next step


@pytest.mark.parametrize("rank, world", [(0, 1), (1, 2)])
def test_the_first_moment_is_the_gradient_of_the_global_batchs_mean_loss(tmp_path, mnist_slice, rank, world) -> None:
    """AdamW's update barely depends on the loss's scale (its first step is about lr * sign(g)); its
    first moment does: (1 - beta1) g. Each rank's chunks are weighted by their share of the global
    batch times the world, so that the ranks' mean gradient (what DDP all-reduces) is the gradient of
    the global batch's mean loss: a lone stand-in rank's own is `world` times its examples' share."""
    import copy
    t = make_trainer(tiny_config(tmp_path, grad_accum=4, model_overrides={
        **tiny_config(tmp_path).model_overrides, "dropout": 0.0}), mnist_slice)
    t.dist = StandInRank(rank=rank, world=world)
    reference = copy.deepcopy(t.model)
    (x, y), n_global = t.task.batch(0, rank, world)
    loss, _ = t.task.loss(reference, (x, y))
    (loss * len(x) / n_global * world).backward()
    t.train_step()
    beta1 = t.cfg.betas[0]
    for (name, p), r in zip(t.model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(t.optimizer.state[p]["exp_avg"], (1 - beta1) * r.grad, rtol=1e-4, atol=1e-8,
                                   msg=name)


def test_a_group_with_an_lr_scale_steps_at_that_multiple_of_the_schedules_rate(tmp_path, mnist_slice) -> None:
    """A model's `lr_scales` (train/optim.py: the text classifier's lexical term at 1000x, its head at
    100x) reach the optimiser as a group's `lr_scale`; each step sets that group's rate to the
    scheduled one times it, and every other group's to the scheduled one."""
    from anyformer.train.optim import lr_at
    t = make_trainer(tiny_config(tmp_path, warmup_steps=3), mnist_slice)
    scaled, *plain = t.optimizer.param_groups
    scaled["lr_scale"] = 10.0
    for step in (1, 5):
        t.step = step
        t.train_step()
        assert scaled["lr"] == pytest.approx(10 * lr_at(step, t.total_steps, t.cfg))
        assert all(g["lr"] == pytest.approx(lr_at(step, t.total_steps, t.cfg)) for g in plain)
    assert lr_at(1, t.total_steps, t.cfg) != lr_at(5, t.total_steps, t.cfg)


@pytest.mark.parametrize("rank, world, limit_train, grad_accum, source", [(2, 3, 1985, 1, 0), (1, 2, 1991, 4, 1)])
def test_a_chunk_without_examples_runs_a_stand_in_weighted_zero(tmp_path, mnist_slice, rank, world, limit_train,
                                                               grad_accum, source) -> None:
    """Every rank runs every chunk (FSDP gathers the weights in each forward), with or without
    examples. Step 62 is the epoch's last: of 1 example (1,985 in batches of 32), which rank 0 of 3
    takes, leaving rank 2 none: its chunk runs rank 0's first example; of 7 examples (1,991), of
    which rank 1 of 2 takes 3 for 4 chunks: its empty chunk runs its first example again, alone. A
    stand-in weighs 0: no gradient, no loss, no stats."""
    t = make_trainer(tiny_config(tmp_path, limit_train=limit_train, grad_accum=grad_accum), mnist_slice)
    t.dist = StandInRank(rank=rank, world=world)
    ran, loss = [], t.task.loss
    t.task.loss = lambda m, chunk: (ran.append(chunk), loss(m, chunk))[1]
    grads, update = [], t.optimizer.step
    t.optimizer.step = lambda: (grads.extend(p.grad.clone() for p in t.model.parameters()), update())[1]
    (mine, _), n_global = t.task.batch(62, rank, world)
    (theirs, _), _ = t.task.batch(62, source, world)
    t.step = 62
    t.train_step()
    assert len(ran) == grad_accum and len(mine) == grad_accum - 1
    # the gradient all-reduce is held back on every chunk but the last
    assert t.dist.held == [(t.forward_model, i == grad_accum - 1) for i in range(grad_accum)]
    stand_in = ran[-1][0]
    assert stand_in.shape[0] == 1 and torch.equal(stand_in, theirs[:1])
    ((_, pending_global, _, sums),) = t.pending
    assert pending_global == n_global == limit_train - 1984
    if not len(mine):  # the stand-in alone ran: nothing to learn from, nothing to count
        assert all(not g.any() for g in grads) and not sums.any()
    else:  # the real chunks' alone
        assert sums[-1].item() == len(mine)  # "count": the real examples', not the stand-in's


def test_a_chunk_runs_on_the_compiled_module_the_plan_holds_for_its_inputs(tmp_path, mnist_slice) -> None:
    """The step plan compiles per input shape (`module_for`); a chunk it has a module for runs on
    that module, asked with the chunk's images, not its labels."""
    t = make_trainer(tiny_config(tmp_path, grad_accum=2), mnist_slice)
    asked, calls = [], []

    class Compiled(torch.nn.Module):  # what the plan's compile of the model would answer
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, x):
            calls.append(x.shape)
            return self.model(x)
    compiled = Compiled(t.model)
    t.step_plan.module_for = lambda x: (asked.append(x), compiled)[1]
    t.train_step()
    (x, _), _ = t.task.batch(0)
    assert len(asked) == 2 and torch.equal(torch.cat(asked), x)
    assert calls == [(16, 1, 28, 28)] * 2


def test_a_steps_loss_is_summed_over_its_chunks_in_float64(tmp_path, mnist_slice) -> None:
    """Step 62's 6 examples in chunks of 2, 2, 1 and 1, each scoring fp32 1/3 (24 bits of mantissa):
    their sum weighted by the chunks' sizes needs 26 bits, exact in float64 and rounded in float32."""
    t = make_trainer(tiny_config(tmp_path, grad_accum=4, limit_train=1990), mnist_slice)
    third, loss = torch.tensor(1 / 3), t.task.loss
    t.task.loss = lambda m, chunk: (lambda l, s: (l - l.detach() + third, s))(*loss(m, chunk))
    t.step = 62
    t.train_step()
    ((_, n_global, _, sums),) = t.pending
    assert n_global == 6 and sums[0].item() == third.item() * 6 != float(third * 6)
    t.sync()
    assert t.last_loss == third.item() * 6 / 6


def test_a_run_asks_its_max_steps_or_its_epochs_and_at_least_one_step(tmp_path, mnist_slice) -> None:
    """63 steps per epoch: 1.5 epochs ask round(94.5) = 94 steps; 0.001 epochs round to none: one."""
    for kw, steps in ((dict(epochs=1.5), 94), (dict(epochs=0.001), 1), (dict(epochs=3, max_steps=7), 7)):
        assert make_trainer(tiny_config(tmp_path / str(steps), **kw), mnist_slice).steps_asked() == steps


def test_a_step_adds_to_the_periods_counts_and_moves_the_average_by_its_number(tmp_path, mnist_slice) -> None:
    """The step's number sets the average's decay: step 9 is the 10th optimiser step, so the average
    moves 1 - min(0.9, (1 + 10) / (10 + 10)) = 0.45 of the way (not a half, where the decay and its
    complement agree); items count each example's units (4 here)."""
    t = make_trainer(tiny_config(tmp_path, ema=0.9), mnist_slice)
    t.task.items_per_example = 4
    t.step, t.sums = 9, {"steps": 2, "items": 64}
    before = {k: v.clone() for k, v in t.ema.model.state_dict().items()}
    t.train_step()
    assert t.sums == {"steps": 3, "items": 64 + 32 * 4}
    assert t.ema.decay_at(10) == pytest.approx(0.55)
    for k, v in t.model.state_dict().items():
        if v.is_floating_point():
            torch.testing.assert_close(t.ema.model.state_dict()[k], before[k] + 0.45 * (v - before[k]), msg=k)
