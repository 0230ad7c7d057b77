"""The text classifier's head started from a linear probe (`head_init="probe"`): Kumar et al.'s LP-FT
("Fine-tuning can distort pretrained features and underperform out-of-distribution", 2022).

A head from small random weights sends large, arbitrary gradients into the pretrained blocks in the first
steps, while it is still far from any fit; fine-tuning then bends the sentence vectors towards a poor head.
LP-FT first fits the head alone on the pretrained encoder's sentence vectors (a logistic regression, which
is convex: one answer), then fine-tunes everything from there. The sentence vectors are the model's own
pooled states in eval mode, before any training, of the training texts alone.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from ..data.text.inputs import pad

C = 1.0             # scikit-learn's default regularisation: the probe is a start, not the answer
MAX_ITER = 1000
ABSENT = -30.0      # the bias of a class no training text holds: as unlikely as the fit can say


@torch.no_grad()
def sentence_vectors(model: nn.Module, ids: list[list[int]], batch: int = 64) -> Tensor:
    """(n, width): each text's pooled state under the model's encoder, in eval mode, in batches of alike
    lengths (little padding; the mean over real tokens does not depend on it)."""
    was = model.training
    model.eval()
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = torch.empty(len(ids), model.config.width)
    for k in range(0, len(order), batch):
        part = order[k:k + batch]
        x, m = pad([ids[i] for i in part])
        out[part] = model.pooled(model.encoder(x, m), m).float()
    model.train(was)
    return out


def probe_weights(vectors: Tensor, labels: Tensor, classes: int) -> tuple[Tensor, Tensor]:
    """(weight (classes, width), bias (classes,)): a multinomial logistic regression of `labels` on
    `vectors`; one class alone gets zero weights and that class's bias."""
    from sklearn.linear_model import LogisticRegression
    y = labels.numpy()
    present = np.unique(y)
    weight = np.zeros((classes, vectors.shape[1]))
    bias = np.full(classes, ABSENT)
    if len(present) == 1:
        bias[present[0]] = 0.0
    else:
        fit = LogisticRegression(C=C, max_iter=MAX_ITER).fit(vectors.numpy().astype(np.float64), y)
        if len(present) == 2:  # one row of coefficients: the second class's logit against the first's 0
            weight[present[1]], bias[present] = fit.coef_[0], (0.0, fit.intercept_[0])
        else:
            weight[present], bias[present] = fit.coef_, fit.intercept_
    return torch.as_tensor(weight, dtype=torch.float32), torch.as_tensor(bias, dtype=torch.float32)


@torch.no_grad()
def init_head_from_probe(model: nn.Module, ids: list[list[int]], labels: Tensor) -> None:
    """The model's head (and each ensemble member's, which start from the same blocks) set to the probe
    fitted on the training texts' sentence vectors."""
    weight, bias = probe_weights(sentence_vectors(model, ids), labels, model.config.num_classes)
    heads = [model.head, *(m.head for m in model.extra_members or ())]
    for head in heads:
        head.weight.copy_(weight)
        head.bias.copy_(bias)
