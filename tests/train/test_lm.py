"""Language modelling with the shared trainer, on real Tiny Shakespeare: it learns, it resumes exactly."""
import json

import numpy as np
import pytest
import torch

import anyformer as af
from anyformer.data.text.corpus import load_corpus
from anyformer.data.text.tokenizers import tokenizer_from_info
from anyformer.models import read_config
from anyformer.train import Interrupted, Trainer, TrainConfig, recipe_config
from anyformer.train.distributed import Distributed
from anyformer.train.lm import LanguageModelling
from tests.conftest import SHARED_DATA

from .conftest import assert_same_checkpoints, assert_same_weights, interrupt_at

TINY = dict(width=48, depth=2, heads=4, context=64, dropout=0.0)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return load_corpus(SHARED_DATA / "tinyshakespeare" / "input.txt", "char",
                       cache_dir=tmp_path_factory.mktemp("textcache"))


def lm_config(tmp_path, **kw) -> TrainConfig:
    values = dict(recipe="test-lm", task="lm", model="shakespeare-char", model_overrides=dict(TINY),
                  data=str(SHARED_DATA / "tinyshakespeare" / "input.txt"), tokenizer="char",
                  out=str(tmp_path / "run"), seq_len=32, batch_size=16, lr=3e-3, warmup_steps=5,
                  max_steps=60, eval_every=20, eval_iters=4, limit_train=200_000, limit_eval=20_000,
                  progress=False, weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0, threads=1)
    values.update(kw)
    return TrainConfig(**values)


def trainer(cfg, corpus) -> Trainer:
    return Trainer(cfg, task=LanguageModelling(cfg, torch.device("cpu"), corpus))


@pytest.mark.slow
def test_batches_are_shifted_windows_fixed_by_seed_and_step_and_shared_over_ranks(tmp_path, corpus):
    task = LanguageModelling(lm_config(tmp_path), torch.device("cpu"), corpus)
    (x, y), n = task.batch(7)
    assert x.shape == y.shape == (16, 32) and x.dtype == torch.long and n == 16
    assert torch.equal(x[:, 1:], y[:, :-1])
    train = np.asarray(corpus.train[:200_000], dtype=np.int64)
    for row_x, row_y in zip(x.numpy(), y.numpy()):  # each row is a real window of the training split
        starts = np.flatnonzero(train[:len(train) - 32] == row_x[0])
        assert any(np.array_equal(train[s:s + 33], np.r_[row_x, row_y[-1]]) for s in starts)
    assert torch.equal(task.batch(7)[0][0], x) and not torch.equal(task.batch(8)[0][0], x)
    shares = [task.batch(7, rank, 3) for rank in range(3)]
    assert all(n_global == 16 for _, n_global in shares)
    assert torch.equal(torch.cat([xr for (xr, _), _ in shares]), x)
    assert task.model_overrides() == {"vocab_size": 65, "context": 64}
    assert task.seq_len == 32 and task.steps_per_epoch == -(-200_000 // (16 * 32))
    assert (task.unit, task.items_per_example) == ("tokens", 32)  # throughput counts tokens, not sequences


def test_evaluation_uses_the_same_windows_and_shards_add_up(tmp_path, corpus):
    cfg = lm_config(tmp_path)
    task = LanguageModelling(cfg, torch.device("cpu"), corpus)
    model = af.GPT.preset("shakespeare-char", **TINY)
    first = task.evaluate(model, Distributed())["eval_loss"]
    assert task.evaluate(model, Distributed())["eval_loss"] == first
    assert 3.5 < first < 5.0  # an untrained model over 65 characters: about ln(65) = 4.17

    class Rank(Distributed):  # one rank of two; the "all-reduce" just records its share
        def sum(self, t):
            self.seen.append(float(t))
            return t
    ranks = [Rank(rank=r, world=2) for r in range(2)]
    for r in ranks:
        r.seen = []
        task.evaluate(model, r)
    total, count = (sum(r.seen[i] for r in ranks) for i in range(2))
    assert count == 4 * 16 * 32
    assert total / count == pytest.approx(first, rel=1e-9)


@pytest.mark.slow
def test_short_run_on_shakespeare_learns_and_writes_the_run_directory(tmp_path, corpus):
    summary = trainer(lm_config(tmp_path, max_steps=150, eval_every=50), corpus).run()
    run = tmp_path / "run"
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert [l["step"] for l in lines] == [50, 100, 150]
    assert lines[0]["eval_loss"] < 3.1  # from ln(65) = 4.17 at step 0 (measured: 2.92)
    assert lines[-1]["eval_loss"] < lines[0]["eval_loss"] - 0.15 and lines[-1]["eval_loss"] < 2.8  # (2.68)
    assert summary["val_loss"] == lines[-1]["eval_loss"]
    best = min(lines, key=lambda m: m["eval_loss"])
    assert (summary["best_val_loss"], summary["best_val_step"], summary["best_val_seconds"]) == (
        best["eval_loss"], best["step"], best["time"])
    assert "test_accuracy" not in summary and "train_accuracy" not in lines[0]
    assert json.loads((run / "summary.json").read_text())["val_loss"] == summary["val_loss"]
    for name in ("config.json", "model.safetensors", "curves.png"):
        assert (run / name).is_file(), name
    meta = read_config(run)
    assert meta["data"]["kind"] == "text" and meta["data"]["seq_len"] == 32
    tok = tokenizer_from_info(meta["data"])
    assert tok.chars == corpus.tokenizer.chars
    model = af.load(run)
    assert model.config.vocab_size == 65 and model.num_params() == summary["params"]
    out = model.generate(torch.tensor([tok.encode("ROMEO:")]), 20, temperature=0)
    assert len(tok.decode(out[0].tolist())) == 26


@pytest.mark.slow
def test_resume_of_a_language_model_run_continues_exactly(tmp_path, corpus):
    kw = dict(max_steps=24, eval_every=8, model_overrides=dict(TINY, dropout=0.1))  # dropout: RNG state matters
    trainer(lm_config(tmp_path / "a", **kw), corpus).run()
    cut = trainer(lm_config(tmp_path / "b", **kw), corpus)
    interrupt_at(cut, 13)
    with pytest.raises(Interrupted, match="after step 13"):
        cut.run()
    resumed = trainer(lm_config(tmp_path / "b", resume=True, **kw), corpus)
    resumed.run()
    assert resumed.step == 24
    assert_same_weights(tmp_path / "a" / "run", tmp_path / "b" / "run")
    assert_same_checkpoints(tmp_path / "a" / "run", tmp_path / "b" / "run")
    strip = lambda p: [{k: v for k, v in json.loads(l).items() if k not in ("time", "tokens_per_s")}
                       for l in p.read_text().splitlines()]
    assert strip(tmp_path / "a" / "run" / "metrics.jsonl") == strip(tmp_path / "b" / "run" / "metrics.jsonl")


def test_shakespeare_recipes():
    c = recipe_config("shakespeare-char")
    assert (c.task, c.model, c.data, c.tokenizer, c.seq_len) == ("lm", "shakespeare-char", "shakespeare", "char", 256)
    assert (c.batch_size, c.lr, c.max_steps, c.warmup_steps, c.min_lr_ratio) == (64, 1e-3, 5000, 100, 0.1)
    assert (c.betas, c.weight_decay, c.grad_clip, c.eval_every, c.eval_iters) == ((0.9, 0.99), 0.1, 1.0, 250, 200)
    # nanoGPT's dropout 0.2 reaches the embeddings, both residual branches and the attention weights
    gpt = af.GPT.preset(c.model, **c.model_overrides)
    drops = {type(m).__name__: m.p for m in gpt.modules() if hasattr(m, "p") and isinstance(m.p, float)}
    assert gpt.config.dropout == 0.2 and gpt.config.attn_dropout == 0.2, gpt.config
    assert all(layer.attn_dropout == 0.2 for layer in gpt.modules() if isinstance(layer, af.nn.MultiHeadAttention))
    assert drops and set(drops.values()) == {0.2}, drops
    cpu = recipe_config("shakespeare-cpu", data="somewhere.txt")
    assert cpu.task == "lm" and cpu.data == "somewhere.txt" and cpu.amp == "auto"
    assert cpu.model_overrides["context"] >= cpu.seq_len


def test_no_recipe_fixes_bf16():
    """bf16 only where the plan measured it faster: emulated bf16 ran 1.7x slower than fp32 (on a 2-core Intel Xeon without native bf16)."""
    from anyformer.train.recipes import RECIPES
    assert {name: r.get("amp") for name, r in RECIPES.items() if r.get("amp") not in (None, "none", "auto")} == {}


def test_bad_lm_settings_are_named(tmp_path, corpus, monkeypatch):
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match=r"seq_len 100 must lie in \[1, the model's context 64\]"):
        LanguageModelling(lm_config(tmp_path, seq_len=100), torch.device("cpu"), corpus)
    with pytest.raises(ValueError, match="a language model run needs a GPT preset, got 'vit-mnist'"):
        LanguageModelling(lm_config(tmp_path, model="vit-mnist"), torch.device("cpu"), corpus)
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("too short\n" * 3)
    with pytest.raises(ValueError, match=r"the validation split of .* has 3 tokens, fewer than one window"):
        LanguageModelling(lm_config(tmp_path, data=str(tiny), seq_len=8), torch.device("cpu"))
