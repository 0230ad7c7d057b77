"""A linear model on the TF-IDF of a token sequence's 1-2 grams, computed in torch so that a model carries it.

The features are scikit-learn's `TfidfVectorizer(sublinear_tf=True)` over a text's token ids and adjacent
pairs of them (`ngram_keys`): tf = 1 + ln(count), times the smoothed idf learned from the training texts,
the vector cut to unit length; a feature never seen in training is dropped, as the vectorizer drops it.
The logits are that vector times the fitted weights, plus the bias (a logistic regression's
`decision_function`). The tables are fitted outside (train/text_prior.py, with scikit-learn) and kept as
buffers: the run's weights file carries them, and nothing here learns.

The counting is done without a dictionary: a position's count is how many real positions hold the same key
(an N x N comparison; N is at most a few hundred tokens), so each occurrence carries 1/count of its
feature's value, and the sum over positions is the sum over distinct features.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn


def ngram_keys(ids: Tensor, mask: Tensor | None, vocab: int) -> tuple[Tensor, Tensor]:
    """(B, 2N - 1) int64 keys and whether each is real: the token ids themselves (a unigram's key is its id),
    then each adjacent pair (a, b) as vocab + a * vocab + b, distinct from every id and every other pair."""
    ids = ids.long()
    real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
    pairs = vocab + ids[:, :-1] * vocab + ids[:, 1:]
    return torch.cat([ids, pairs], 1), torch.cat([real, real[:, :-1] & real[:, 1:]], 1)


def ngram_key_list(ids: list[int], vocab: int) -> list[int]:
    """`ngram_keys` for one unpadded text, as a list: what the vectorizer is fitted on."""
    return list(ids) + [vocab + a * vocab + b for a, b in zip(ids, ids[1:])]


class TfidfLinear(nn.Module):
    """`module(ids, mask)` -> (B, classes): TF-IDF of the 1-2 grams of ids, times `weight`, plus `bias`."""

    def __init__(self, features: int, classes: int, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.register_buffer("keys", torch.zeros(features, dtype=torch.long))   # sorted, ascending
        self.register_buffer("idf", torch.zeros(features))
        self.register_buffer("weight", torch.zeros(features, classes))
        self.register_buffer("bias", torch.zeros(classes))

    @torch.no_grad()
    def load(self, keys: Tensor, idf: Tensor, weight: Tensor, bias: Tensor) -> None:
        """The fitted tables, features in any order (they are sorted by key here)."""
        if not (keys.shape == idf.shape == weight.shape[:1] == self.keys.shape and bias.shape == self.bias.shape
                and weight.shape == self.weight.shape):
            raise ValueError(f"TF-IDF tables of {tuple(keys.shape)} keys, {tuple(idf.shape)} idf, "
                             f"{tuple(weight.shape)} weights, {tuple(bias.shape)} bias; expected "
                             f"{tuple(self.weight.shape)} weights")
        order = torch.argsort(keys)
        self.keys.copy_(keys[order])
        self.idf.copy_(idf[order])
        self.weight.copy_(weight[order])
        self.bias.copy_(bias)

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        keys, real = ngram_keys(ids, mask, self.vocab)
        if self.keys.numel() == 0:
            return self.bias.expand(ids.shape[0], -1)
        row = torch.searchsorted(self.keys, keys).clamp_max(self.keys.numel() - 1)
        known = real & (self.keys[row] == keys)
        same = (keys[:, :, None] == keys[:, None, :]) & known[:, None, :]
        count = same.sum(-1).clamp_min(1).to(self.idf.dtype)
        value = (1 + count.log()) * self.idf[row] * known   # a feature never fitted counts nothing
        share = value / count                                   # each occurrence's part of its feature's value
        norm = (share * value).sum(1, keepdim=True).sqrt()     # the sum over distinct features of value^2
        x = share / norm.clamp_min(torch.finfo(share.dtype).tiny)
        return torch.einsum("bn,bnc->bc", x, self.weight[row]) + self.bias
