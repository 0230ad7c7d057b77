"""train/text_prior.py: the stacked TF-IDF prior's out-of-fold logits come from fits that never saw the text,
the carried tables are the fit on every training text, and a fold short of a class still answers; the model
adds the prior's logits times its learned scale, given in training or computed from the tokens."""
import numpy as np
import pytest
import torch

from anyformer.data.text.inputs import pad
from anyformer.models.text_classifier import TextClassifier, TextClassifierConfig
from anyformer.nn.tfidf import TfidfLinear
from anyformer.train import text_prior

pytest.importorskip("sklearn")
VOCAB = 30


def corpus(n: int = 60, classes: int = 3, seed: int = 0) -> tuple[list[list[int]], torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    # each class leans on its own ids, with shared noise, so a linear model learns something
    ids = [[2 + 3 * int(y) + int(torch.randint(0, 3, (1,), generator=g))] +
           torch.randint(12, VOCAB, (5,), generator=g).tolist() for y in labels]
    return ids, labels


def carried(prior: text_prior.Prior, classes: int) -> TfidfLinear:
    module = TfidfLinear(prior.features, classes, VOCAB)
    module.load(prior.keys, prior.idf, prior.weight, prior.bias)
    return module


def test_each_training_text_is_answered_by_a_fit_without_its_fold():
    ids, labels = corpus()
    prior = text_prior.fit_prior(ids, labels, 3, VOCAB, seed=4)
    full = carried(prior, 3)(*pad(ids))
    from sklearn.model_selection import StratifiedKFold
    for fit_rows, held in StratifiedKFold(text_prior.FOLDS, shuffle=True, random_state=4).split(ids, labels):
        part = text_prior.fit_prior([ids[i] for i in fit_rows], labels[fit_rows], 3, VOCAB, seed=4)
        want = carried(part, 3)(*pad([ids[i] for i in held]))
        assert torch.allclose(prior.oof[held], want, atol=1e-4)
        # and not the full fit's answers, which have seen those texts
        assert not torch.allclose(prior.oof[held], full[held], atol=1e-2)
    # the seed decides the folds: the same seed, the same logits
    assert torch.equal(prior.oof, text_prior.fit_prior(ids, labels, 3, VOCAB, seed=4).oof)


def test_a_fold_without_a_class_says_it_is_unlikely_and_one_class_alone_is_every_answer():
    ids, labels = corpus(40, classes=2)
    labels = labels.clone()
    labels[0] = 2  # a third class with one text: no stratified folds, and four of five fits never see it
    prior = text_prior.fit_prior(ids, labels, 3, VOCAB, seed=0)
    assert prior.oof[0].argmax() != 2 and prior.oof[0, 2] < -20
    assert prior.weight.shape == (prior.features, 3)
    weight, bias = text_prior._fit([[1, 2], [3]], np.array([1, 1]), 3)[1:]
    assert not weight.any() and bias.argmax() == 1 and bias[0] < -20


def test_the_model_adds_the_prior_times_its_scale_given_or_computed():
    ids, labels = corpus()
    prior = text_prior.fit_prior(ids, labels, 3, VOCAB, seed=0)
    config = TextClassifierConfig(vocab_size=VOCAB, width=16, depth=1, heads=2, max_positions=16, num_classes=3,
                                  prior=True, prior_features=prior.features, head_dropout=0.0)
    model = TextClassifier(config).eval()
    model.prior.load(prior.keys, prior.idf, prior.weight, prior.bias)
    x, mask = pad(ids[:4])
    with torch.no_grad():
        model.prior_scale.fill_(0.5)
        deep = model._deep(x, mask)
        computed = model(x, mask)
        given = model(x, mask, prior=prior.oof[:4])
    assert torch.allclose(computed, deep + 0.5 * model.prior(x, mask), atol=1e-6)
    assert torch.allclose(given, deep + 0.5 * prior.oof[:4], atol=1e-6)
    assert model.lr_scales == {"prior_scale": config.prior_lr_scale}
    # kept states in place of ids: the prior reads the tokens beside them, or is given
    states = torch.zeros(4, x.shape[1], 16)
    with pytest.raises(ValueError, match="needs tokens"):
        model(states, mask)
    assert model(states, mask, prior=prior.oof[:4]).shape == (4, 3)
    # the tables travel with the weights
    again = TextClassifier(config)
    again.load_state_dict(model.state_dict())
    assert torch.equal(again.prior.weight, model.prior.weight) and torch.equal(again.prior.keys, model.prior.keys)
