"""index_span: the range check of ids and labels reads them on the CPU always, and on a GPU only where
no gradient is recorded, so that a training step there never waits for the device to read them."""
import pytest
import torch

from anyformer.nn import TokenEmbedding
from anyformer.nn.embeddings import index_span


def test_the_span_is_read_on_the_cpu_in_training_and_out_of_it() -> None:
    ids = torch.tensor([[3, 0, 7]])
    assert index_span(ids) == (0, 7)
    with torch.no_grad():
        assert index_span(ids) == (0, 7)
    assert index_span(ids[:, :0]) is None


def test_a_training_step_off_the_cpu_does_not_read_the_span() -> None:
    # The meta device stands for a GPU here: any read of its values would raise.
    ids = torch.zeros(2, 3, dtype=torch.long, device="meta")
    assert index_span(ids) is None


def test_an_id_out_of_range_is_still_refused_in_a_cpu_training_step() -> None:
    table = TokenEmbedding(5, 4)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 5\); got values in \[0, 9\]"):
        table(torch.tensor([[0, 9]])).sum().backward()
