"""The held-out share of data without a test split (data/split.py): stratified, drawn by the seed
alone, disjoint from training, and refused in one line where it cannot be made."""
import pytest
import torch

from anyformer.data import DataError
from anyformer.data.split import check_classes, holdout_fraction, stratified_holdout


def labels_of(*counts: int) -> torch.Tensor:
    return torch.cat([torch.full((n,), c) for c, n in enumerate(counts)])[torch.randperm(sum(counts),
                                                                                        generator=torch.Generator().manual_seed(5))]


def test_each_class_gives_its_share_and_no_example_is_on_both_sides():
    labels = labels_of(50, 20, 10)
    train, held = stratified_holdout(labels, 0.2, seed=0)
    assert set(train.tolist()).isdisjoint(held.tolist())
    assert sorted(train.tolist() + held.tolist()) == list(range(len(labels)))
    assert torch.bincount(labels[held]).tolist() == [10, 4, 2]
    assert torch.equal(held, held.sort().values)


def test_the_seed_alone_draws_the_share():
    labels = labels_of(30, 30)
    a, b, c = (stratified_holdout(labels, 0.3, seed=s)[1] for s in (1, 1, 2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_the_derived_share_gives_the_smallest_class_two_and_never_more_than_half():
    assert holdout_fraction(labels_of(100, 100)) == 0.2
    assert holdout_fraction(labels_of(100, 5)) == pytest.approx(0.4)
    assert holdout_fraction(labels_of(100, 3)) == 0.5
    assert holdout_fraction(labels_of(100, 100), 0.1) == 0.1
    with pytest.raises(DataError, match=r"must lie in \(0, 1\)"):
        holdout_fraction(labels_of(10, 10), 1.5)


@pytest.mark.parametrize("counts, fraction, message", [
    ((40, 4), 0.2, "class 'b' has 4 examples, so a held-out share of 20% gives it 1 for validation"),
    ((40, 2), 0.5, "class 'b' has 2 examples, so a held-out share of 50% gives it 1"),
    ((40, 4), 0.9, "gives it 4 for validation and 0 for training"),
])
def test_a_class_too_small_for_the_share_is_refused_in_one_line(counts, fraction, message):
    with pytest.raises(DataError, match=message) as e:
        stratified_holdout(labels_of(*counts), fraction, seed=0, classes=["a", "b"])
    assert "\n" not in str(e.value) and "--val-fraction" in str(e.value)


def test_no_examples_or_one_class_cannot_train_a_classifier():
    with pytest.raises(DataError, match="holds no labelled examples"):
        check_classes(torch.zeros(0, dtype=torch.long), ["a"], "photos/")
    with pytest.raises(DataError, match=r"holds one class only \('cats', 7 examples\)"):
        check_classes(torch.zeros(7, dtype=torch.long), ["cats"], "photos/")
    check_classes(labels_of(3, 3), ["a", "b"], "photos/")
