"""The text classifier's prior: TF-IDF of the training texts' token 1-2 grams and a logistic regression
(scikit-learn, the settings of `--baseline`'s TF-IDF), stacked under the network (Wolpert 1992).

The network adds the prior's logits, scaled by a learned factor, to its own. Trained on the prior's answers
for texts the prior was fitted on, it would learn to trust a model that has seen every answer; so each
training text gets the answer of a prior fitted without it (`FOLDS` seeded folds: out-of-fold logits),
and the prior fitted on every training text is what the model carries for the texts it has not seen.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..nn.tfidf import ngram_key_list

FOLDS = 5
C = 10.0                 # the regularisation of --baseline's TF-IDF + logistic regression
MAX_FEATURES = 100_000   # the most frequent 1-2 grams kept: the tables' size stays bounded on a large corpus


@dataclass
class Prior:
    keys: Tensor        # (F,) int64 1-2 gram keys (nn/tfidf.py's `ngram_keys`)
    idf: Tensor         # (F,)
    weight: Tensor      # (F, classes)
    bias: Tensor        # (classes,)
    oof: Tensor         # (n, classes): each training text's logits from the prior fitted without its fold

    @property
    def features(self) -> int:
        return int(self.keys.numel())


def _fit(docs: list[list[int]], labels: np.ndarray, classes: int) -> tuple:
    """(vectorizer, weight (F, classes), bias (classes,)) fitted on `docs`; a part
    holding one class alone gets zero weights and that class's bias."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    vectorizer = TfidfVectorizer(analyzer=lambda doc: doc, sublinear_tf=True, max_features=MAX_FEATURES)
    x = vectorizer.fit_transform(docs)
    weight = np.zeros((x.shape[1], classes), dtype=np.float64)
    bias = np.zeros(classes, dtype=np.float64)
    present = np.unique(labels)
    if len(present) == 1:  # nothing to tell apart: every text is that class
        bias[:] = -30.0
        bias[present[0]] = 0.0
        return vectorizer, weight, bias
    lr = LogisticRegression(max_iter=2000, C=C).fit(x, labels)
    if len(present) == 2:  # one column of coefficients: the second class's logit against the first's 0
        weight[:, present[1]], bias[present[1]] = lr.coef_[0], lr.intercept_[0]
    else:
        weight[:, present], bias[present] = lr.coef_.T, lr.intercept_
    absent = np.setdiff1d(np.arange(classes), present)
    bias[absent] = -30.0  # a class the part never saw: as unlikely as the fit can say
    return vectorizer, weight, bias


def _logits(vectorizer, weight: np.ndarray, bias: np.ndarray, docs: list[list[int]]) -> np.ndarray:
    return np.asarray(vectorizer.transform(docs) @ weight) + bias


def fit_prior(ids: list[list[int]], labels: Tensor, classes: int, vocab: int, seed: int) -> Prior:
    """The prior fitted on the training texts' token ids, and its out-of-fold logits for each of them."""
    from sklearn.model_selection import KFold, StratifiedKFold
    docs = [ngram_key_list(x, vocab) for x in ids]
    y = labels.numpy()
    vectorizer, weight, bias = _fit(docs, y, classes)
    oof = np.zeros((len(docs), classes))
    counts = np.bincount(y)
    smallest = int(counts[counts > 0].min())
    k = min(FOLDS, len(docs))
    if k >= 2:
        # stratified where every class can be in each fold; else plain folds (a rare class's few texts
        # then get a prior that never saw their class, which is what it would say of a new one)
        split = (StratifiedKFold(k, shuffle=True, random_state=seed) if smallest >= k
                 else KFold(k, shuffle=True, random_state=seed))
        for fit_rows, held in split.split(np.zeros(len(docs)), y):
            part = [docs[i] for i in fit_rows]
            v, w, b = _fit(part, y[fit_rows], classes)
            oof[held] = _logits(v, w, b, [docs[i] for i in held])
    features = np.asarray(vectorizer.get_feature_names_out(), dtype=np.int64)
    return Prior(keys=torch.as_tensor(features), idf=torch.as_tensor(vectorizer.idf_, dtype=torch.float32),
                 weight=torch.as_tensor(weight, dtype=torch.float32), bias=torch.as_tensor(bias, dtype=torch.float32),
                 oof=torch.as_tensor(oof, dtype=torch.float32))
