"""Language modelling's numbers on hand-made token streams and a model whose loss is known in
closed form, no trainer run: the seeded batches shared over ranks, the loss, the FLOPs per token,
the evaluation's loss and bits per byte (targets already scored ignored), all on the task's device."""
import math

import numpy as np
import pytest
import torch

from anyformer.train.distributed import Distributed

from .lm_fakes import TableModel, fake_corpus, nll, task_of

# ---------------------------------------------------------------- batches and the loss

def test_batches_are_seeded_windows_shared_over_ranks():
    """Starts drawn by randint(0, len - seq_len) from the generator of (seed, step); x and y the
    window shifted by one; each of `world` ranks keeps its ceil(n / world) rows; n returned whole."""
    corpus = fake_corpus(500, 400, vocab=50, seed=7)
    task = task_of(corpus, batch_size=7, seed=1234)
    g = torch.Generator().manual_seed(1234 * 1_000_003 + 5 * 7919)
    starts = torch.randint(0, 400 - 10, (7,), generator=g).numpy()
    train = corpus.tokens[:400].astype(np.int64)
    want = np.stack([train[s:s + 11] for s in starts])
    (x, y), n = task.batch(5)
    assert n == 7 and x.dtype == y.dtype == torch.int64 and x.shape == (7, 10)
    assert x.tolist() == want[:, :-1].tolist() and y.tolist() == want[:, 1:].tolist()
    for rank, rows in enumerate([slice(0, 3), slice(3, 6), slice(6, 7)]):
        (xr, yr), n = task.batch(5, rank, 3)
        assert n == 7 and xr.tolist() == want[rows, :-1].tolist() and yr.tolist() == want[rows, 1:].tolist()
    (x6, _), _ = task.batch(6)
    assert x6.tolist() != x.tolist()


def test_a_batch_reaches_the_last_window_and_no_further():
    """With one possible start more than the first, both occur (randint's upper bound is exclusive)."""
    corpus = fake_corpus(200, 12, vocab=50, seed=8)
    task = task_of(corpus, batch_size=64)
    (x, y), _ = task.batch(3)
    train = corpus.tokens[:12].astype(np.int64)
    firsts = {tuple(r) for r in x.tolist()}
    assert firsts == {tuple(train[:10]), tuple(train[1:11])}
    assert {tuple(r) for r in y.tolist()} == {tuple(train[1:11]), tuple(train[2:12])}


def test_the_loss_is_the_mean_cross_entropy_of_every_position():
    corpus = fake_corpus(300, 200, vocab=9, seed=9)
    task = task_of(corpus)
    model = TableModel(9, seed=3)
    g = torch.Generator().manual_seed(11)
    x, y = torch.randint(0, 9, (4, 10), generator=g), torch.randint(0, 9, (4, 10), generator=g)
    loss, extra = task.loss(model, (x, y))
    want = sum(nll(model.table, a, b) for a, b in zip(x.flatten().tolist(), y.flatten().tolist())) / 40
    assert extra == {} and loss.dtype == torch.float32
    assert float(loss) == pytest.approx(want, rel=1e-6)


def test_flops_per_item_are_three_forward_passes_per_token():
    task = task_of(fake_corpus(300, 200), seq_len=13)
    assert task.flops_per_item(TableModel(7)) == 3.0 * (1000.0 * 13 + 7.0 * 169) / 13


# ---------------------------------------------------------------- evaluation

def test_evaluation_loss_and_bits_per_byte_of_the_fixed_windows():
    """eval_loss: the mean over every target of the validation windows; val_bpb: the nats of the
    targets of non-zero bytes over ln 2 x those bytes. The model is put back in training mode."""
    nbytes = np.array([1, 2, 0, 3, 1, 4, 2])
    corpus = fake_corpus(600, 400, seed=10, nbytes=nbytes)
    task = task_of(corpus, eval_iters=2, batch_size=5)
    model = TableModel(7, seed=4).train()
    got = task.evaluate(model, Distributed())
    val = corpus.tokens[400:].astype(np.int64)
    total = count = nats = nb = 0.0
    for s in task.val_starts:
        for t in range(10):
            a, b = val[s + t], val[s + t + 1]
            loss = nll(model.table, a, b)
            total, count = total + loss, count + 1
            if nbytes[b]:
                nats, nb = nats + loss, nb + nbytes[b]
    assert count == 100 and model.training and model.calls == [False, False]
    assert got["eval_loss"] == pytest.approx(total / count, rel=1e-6)
    assert got["val_bpb"] == pytest.approx(nats / (math.log(2) * nb), rel=1e-6)


def test_evaluation_of_other_text_scores_each_token_after_the_first_once():
    nbytes = np.array([3, 1, 1, 0, 2])
    corpus = fake_corpus(103, 50, vocab=5, seed=11, nbytes=nbytes)
    task = task_of(corpus, info={"kind": "text", "dataset": "own.txt"}, seq_len=12, batch_size=4)
    assert task.val_skip[-1] > 0
    model = TableModel(5, seed=5)
    got = task.evaluate(model, Distributed())
    toks = corpus.tokens.astype(np.int64)
    losses = [nll(model.table, toks[i - 1], toks[i]) for i in range(1, 103)]
    text = [i - 1 for i in range(1, 103) if nbytes[toks[i]]]
    assert got["eval_loss"] == pytest.approx(sum(losses) / 102, rel=1e-6)
    assert got["val_bpb"] == pytest.approx(sum(losses[k] for k in text) / (math.log(2) * nbytes[toks[1:]].sum()),
                                           rel=1e-6)


def test_targets_already_scored_are_ignored():
    task = task_of(fake_corpus(300, 200))
    y = torch.randint(0, 7, (3, 6), generator=torch.Generator().manual_seed(2))
    got = task._skip_scored(y, np.array([0, 2, 6]))
    want = y.clone()
    want[1, :2], want[2, :] = -100, -100
    assert torch.equal(got, want)
    assert torch.equal(task._skip_scored(y, np.zeros(3, dtype=np.int64)), y)


def test_windows_are_made_on_the_tasks_device():
    """On the meta device (no data, but a device other than the host): batches, the bytes per
    token and the mask of targets already scored live there."""
    task = task_of(fake_corpus(300, 200), device="meta")
    assert task.token_bytes.device.type == "meta"
    (x, y), _ = task.batch(1)
    assert x.device.type == y.device.type == "meta" and x.shape == (6, 10)
    skipped = task._skip_scored(y, np.array([0, 2, 4, 0, 0, 1]))
    assert skipped.device.type == "meta" and skipped.shape == y.shape
