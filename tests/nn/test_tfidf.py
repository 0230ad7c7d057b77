"""nn.tfidf.TfidfLinear against scikit-learn itself: TfidfVectorizer(sublinear_tf=True) over the same 1-2 gram
keys and a LogisticRegression's decision_function, on padded batches with repeated tokens, tokens never seen
in fitting, and a text with no known feature."""
import numpy as np
import pytest
import torch

from anyformer.data.text.inputs import pad
from anyformer.nn.tfidf import TfidfLinear, ngram_key_list, ngram_keys

sklearn = pytest.importorskip("sklearn")
from sklearn.feature_extraction.text import TfidfVectorizer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402

VOCAB = 40


def sequences(n: int, seed: int, low: int = 1, high: int = VOCAB) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    # a small range of ids, so that texts repeat tokens and pairs
    return [torch.randint(low, high, (int(torch.randint(1, 16, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


def fitted(docs: list[list[int]], labels: np.ndarray) -> tuple[TfidfVectorizer, LogisticRegression, TfidfLinear]:
    vectorizer = TfidfVectorizer(analyzer=lambda d: d, sublinear_tf=True)
    keyed = [ngram_key_list(d, VOCAB) for d in docs]
    lr = LogisticRegression(max_iter=2000, C=10.0).fit(vectorizer.fit_transform(keyed), labels)
    classes = len(lr.classes_)
    weight = lr.coef_.T if classes > 2 else np.stack([np.zeros(lr.coef_.shape[1]), lr.coef_[0]], 1)
    bias = lr.intercept_ if classes > 2 else np.array([0.0, lr.intercept_[0]])
    keys = np.asarray(vectorizer.get_feature_names_out(), dtype=np.int64)
    module = TfidfLinear(len(keys), classes, VOCAB)
    # the features handed over shuffled: load sorts them
    order = np.random.default_rng(0).permutation(len(keys))
    module.load(torch.as_tensor(keys[order]), torch.as_tensor(vectorizer.idf_[order], dtype=torch.float32),
                torch.as_tensor(weight[order], dtype=torch.float32), torch.as_tensor(bias, dtype=torch.float32))
    return vectorizer, lr, module


@pytest.mark.parametrize("classes", [2, 3])
def test_the_logits_are_scikit_learns_tfidf_and_logistic_regression(classes):
    docs = sequences(120, seed=classes, high=30)
    labels = np.array([d[0] % classes for d in docs])
    vectorizer, lr, module = fitted(docs, labels)
    # ids from 30 up were never fitted, so that some texts hold features never seen; and a text of unseen ids
    # alone, whose vector is zero (the bias alone)
    test = sequences(25, seed=9) + sequences(5, seed=10, low=30) + [[VOCAB - 2, VOCAB - 1]]
    ids, mask = pad(test)
    got = module(ids, mask)
    want = lr.decision_function(vectorizer.transform([ngram_key_list(t, VOCAB) for t in test]))
    want = want if classes > 2 else np.stack([np.zeros_like(want), want], 1)
    assert np.abs(got.numpy() - want).max() < 1e-5
    assert torch.equal(got[-1], module.bias)


def test_padding_adds_nothing_and_pair_keys_never_meet_a_token():
    ids = torch.tensor([[5, 6, 5, 6, 0, 0]])
    keys, real = ngram_keys(ids, torch.tensor([[1, 1, 1, 1, 0, 0]]), VOCAB)
    assert real.sum() == 4 + 3
    pairs = keys[0, 6:][real[0, 6:]]
    assert pairs.tolist() == [VOCAB + 5 * VOCAB + 6, VOCAB + 6 * VOCAB + 5, VOCAB + 5 * VOCAB + 6]
    assert bool((pairs >= VOCAB).all())
    assert ngram_key_list([5, 6, 5, 6], VOCAB) == keys[0][real[0]].tolist()
    docs = sequences(60, seed=3)
    _, _, module = fitted(docs, np.array([d[0] % 2 for d in docs]))
    short, long = pad([[7, 8, 9]]), pad([[7, 8, 9], list(range(1, 12))])
    assert torch.allclose(module(*short)[0], module(*long)[0], atol=1e-6)


def test_tables_of_the_wrong_shape_are_refused():
    with pytest.raises(ValueError, match="expected"):
        TfidfLinear(3, 2, VOCAB).load(torch.arange(4), torch.ones(4), torch.zeros(4, 2), torch.zeros(2))
