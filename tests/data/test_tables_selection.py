"""The rows a table run holds back from training to pick the evaluation it keeps (selection_rows):
a seeded share of each class or of all rows, disjoint from the rows trained on, never refused."""
import torch

from anyformer.data.tables.load import selection_rows


def test_each_class_gives_its_share_and_every_row_is_on_one_side():
    labels = torch.tensor([0] * 40 + [1] * 20 + [2] * 3)
    fit, held = selection_rows(labels, len(labels), 0.15, seed=1)
    assert sorted(fit.tolist() + held.tolist()) == list(range(len(labels)))
    assert torch.bincount(labels[held], minlength=3).tolist() == [6, 3, 0]  # 0.45 of a class rounds to none
    assert torch.equal(fit, fit.sort().values) and torch.equal(held, held.sort().values)


def test_a_class_of_one_row_keeps_it_for_training():
    labels = torch.tensor([0] * 30 + [1])
    fit, held = selection_rows(labels, len(labels), 0.9, seed=0)
    assert 30 in fit.tolist() and torch.bincount(labels[fit]).tolist() == [3, 1]


def test_a_number_to_predict_takes_a_share_of_all_rows_drawn_by_the_seed():
    a, b, c = (selection_rows(None, 200, 0.15, seed=s)[1] for s in (4, 4, 5))
    assert len(a) == 30 and torch.equal(a, b) and not torch.equal(a, c)
