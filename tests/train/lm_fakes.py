"""Language modelling's tests' stand-ins: a tokenizer that is a table of byte lengths, a model whose
logits are a row of a fixed table for the input token (so each target's loss is known in closed
form), hand-made token corpora, and the task built on them with a small GPT's settings."""
import warnings

import numpy as np
import torch
from torch import nn

from anyformer.data import DataWarning
from anyformer.data.text.corpus import TokenCorpus
from anyformer.train import TrainConfig
from anyformer.train.lm import LanguageModelling

SMALL = dict(width=16, depth=1, heads=2, context=24, dropout=0.0)


class FakeTok:
    """A tokenizer as the task uses one: a vocabulary, a kind, and the UTF-8 bytes of each token."""

    def __init__(self, nbytes, kind="bpe"):
        self.nbytes, self.kind = np.asarray(nbytes, dtype=np.int64), kind

    @property
    def vocab_size(self):
        return len(self.nbytes)

    def token_byte_lengths(self):
        return self.nbytes.copy()

    def to_info(self):
        return {"tokenizer": self.kind, "vocab_size": self.vocab_size}


class TableModel(nn.Module):
    """Logits that depend on the input token only (a row of a fixed random table), so each target's
    loss is known in closed form whatever window it sits in; forward_flops is a fixed polynomial."""

    def __init__(self, vocab, seed=0):
        super().__init__()
        self.table = torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        self.calls = []

    def forward(self, x):
        self.calls.append(self.training)
        return self.table[x]

    @staticmethod
    def forward_flops(seq_len):
        return 1000.0 * seq_len + 7.0 * seq_len ** 2


def nll(table, a, b):
    """-log p(b | a) under TableModel, in float64."""
    row = table[a]
    return float(torch.logsumexp(row, 0) - row[b])


def config(data="nowhere/fake.txt", **kw) -> TrainConfig:
    values = dict(recipe="test-lm-units", task="lm", model="shakespeare-char", model_overrides=dict(SMALL),
                  data=str(data), seq_len=10, batch_size=6, eval_iters=3, seed=1234, progress=False,
                  plots=False, threads=1)
    values.update(kw)
    return TrainConfig(**values)


def fake_corpus(n, split, vocab=7, seed=0, nbytes=None, kind="bpe", name="nowhere/fake.txt"):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, n).astype(np.uint16)
    tok = FakeTok(rng.integers(0, 5, vocab) if nbytes is None else nbytes, kind)
    return TokenCorpus(tok, tokens, split, name, [name], "c0ffee")


def task_of(corpus, device="cpu", info=None, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        return LanguageModelling(config(**kw), torch.device(device), corpus, info=info)
