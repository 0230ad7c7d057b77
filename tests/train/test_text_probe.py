"""The text classifier's head started from a linear probe (head_init="probe", train/text_probe.py): the
probe's answers are the logistic regression's, every ensemble member's head starts from it, a class no
training text holds is as unlikely as the fit can say, and a run from it is the same bits twice."""
import json

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from anyformer.data.text.inputs import pad
from anyformer.models.text_classifier import TextClassifierConfig
from anyformer.train.text_probe import ABSENT, C, init_head_from_probe, probe_weights, sentence_vectors

from .test_text_classify import scratch, trained_twice  # noqa: F401 - scratch is a fixture
from .test_text_states import tiny


def blobs(classes: int, n: int = 30, width: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, width, generator=g) * 3
    labels = torch.arange(n) % classes
    return centres[labels] + torch.randn(n, width, generator=g), labels


@pytest.mark.parametrize("classes", [2, 4])
def test_the_probe_gives_the_logistic_regressions_answers(classes):
    x, y = blobs(classes)
    weight, bias = probe_weights(x, y, classes)
    fit = LogisticRegression(C=C, max_iter=1000).fit(x.numpy().astype(np.float64), y.numpy())
    logits = (x @ weight.T + bias).numpy()
    assert (logits.argmax(1) == fit.predict(x.numpy().astype(np.float64))).all()
    # the logit differences are the fit's decision values (for two classes: the second's against the first)
    decision = fit.decision_function(x.numpy().astype(np.float64))
    mine = logits[:, 1] - logits[:, 0] if classes == 2 else logits
    np.testing.assert_allclose(mine, decision, rtol=1e-4, atol=1e-4)


def test_a_class_no_training_text_holds_is_as_unlikely_as_the_fit_can_say():
    x, y = blobs(3)
    y = torch.where(y == 1, torch.tensor(2), y)  # classes 0 and 2 only, of 3
    weight, bias = probe_weights(x, y, 3)
    assert bias[1] == ABSENT and not weight[1].any()
    logits = x @ weight.T + bias
    assert set((logits.argmax(1)).tolist()) <= {0, 2}
    # one class alone: that class, whatever the text
    weight, bias = probe_weights(x, torch.full((len(x),), 2), 3)
    assert not weight.any() and bias.tolist() == [ABSENT, ABSENT, 0.0]


@pytest.mark.parametrize("members", [1, 2])
def test_the_heads_start_from_the_probe_of_the_training_texts(members):
    model = tiny(0, members=members)
    ids = [[2, 5 + i % 7, 7 + i % 3, 3] for i in range(24)]
    labels = torch.tensor([i % 3 for i in range(24)])
    init_head_from_probe(model, ids, labels)
    vectors = sentence_vectors(model, ids, batch=5)
    fit = LogisticRegression(C=C, max_iter=1000).fit(vectors.numpy().astype(np.float64), labels.numpy())
    with torch.no_grad():
        predicted = model(*pad(ids)).argmax(1)
    assert predicted.tolist() == fit.predict(vectors.numpy().astype(np.float64)).tolist()
    for member in model.extra_members or ():
        torch.testing.assert_close(member.head.weight, model.head.weight, rtol=0, atol=0)


def test_a_head_start_other_than_random_or_probe_is_refused():
    with pytest.raises(ValueError, match="head_init must be one of random, probe, got 'zeros'"):
        TextClassifierConfig(head_init="zeros")


def test_a_run_from_the_probe_is_the_same_bits_twice_and_records_it(tmp_path, scratch):  # noqa: F811
    _, run = trained_twice(tmp_path, "--set", "head_init=probe")
    meta = json.loads((run / "config.json").read_text())
    assert meta["config"]["head_init"] == "probe"
