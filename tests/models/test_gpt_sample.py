"""`sample` draws with the generator it is given wherever the logits live: the CLI and the server
pass CPU generators, and the same seed must give the same tokens on any device."""
import pytest
import torch

from anyformer.models.sampling import sample


def test_a_seeded_generator_gives_the_same_draws_every_time():
    logits = torch.randn(4, 50)
    draws = [sample(logits, top_k=20, generator=torch.Generator().manual_seed(3)) for _ in range(2)]
    assert torch.equal(*draws) and draws[0].shape == (4, 1) and draws[0].device == logits.device


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_logits_with_a_cpu_generator_give_the_cpu_tokens():
    logits = torch.randn(4, 50)
    on_cpu = sample(logits, top_p=0.9, generator=torch.Generator().manual_seed(3))
    on_cuda = sample(logits.cuda(), top_p=0.9, generator=torch.Generator().manual_seed(3))
    assert on_cuda.device.type == "cuda" and torch.equal(on_cuda.cpu(), on_cpu)


def test_the_filter_divides_by_the_temperature_and_keeps_exactly_the_top_k():
    from anyformer.models.sampling import filter_logits
    logits = torch.tensor([[3.0, 1.0, 2.0, 2.0, 0.0]])
    torch.testing.assert_close(filter_logits(logits, 2.0), logits / 2)
    ninf = float("-inf")
    # Ties at the k-th value are kept: k bounds the rank, not the count.
    assert filter_logits(logits, 1.0, top_k=2).tolist() == [[3.0, ninf, 2.0, 2.0, ninf]]
    assert filter_logits(logits, 1.0, top_k=1).tolist() == [[3.0, ninf, ninf, ninf, ninf]]
    assert torch.equal(filter_logits(logits, 1.0, top_k=5), logits)  # all of them: nothing cut


def test_the_nucleus_is_the_smallest_set_whose_probabilities_reach_top_p():
    from anyformer.models.sampling import filter_logits
    ninf = float("-inf")
    logits = torch.tensor([[0.0, 2.0, 1.0, 0.5]])  # probabilities in the order 1, 2, 3, 0
    probs = logits.softmax(-1)[0]
    top = probs[1].item()
    assert filter_logits(logits, 1.0, top_p=top - 1e-3).tolist() == [[ninf, 2.0, ninf, ninf]]
    assert filter_logits(logits, 1.0, top_p=top + 1e-3).tolist() == [[ninf, 2.0, 1.0, ninf]]
    # A set whose mass equals top_p exactly reaches it: the next token is not needed.
    halves = torch.tensor([[0.0, -1.0, -1.0]]).mul(torch.log(torch.tensor(2.0)))  # probabilities 1/2, 1/4, 1/4
    assert halves.softmax(-1).tolist() == [[0.5, 0.25, 0.25]]
    assert filter_logits(halves, 1.0, top_p=0.5).isinf().tolist() == [[False, True, True]]
    assert torch.equal(filter_logits(logits, 1.0, top_p=1.0), logits)  # everything: nothing cut
    # Even a token whose probability is below float32's resolution (the mass before it rounds to 1).
    unlikely = torch.tensor([[0.0, -30.0]])
    assert torch.equal(filter_logits(unlikely, 1.0, top_p=1.0), unlikely)
    # Within the nucleus the logits keep their places: the order is put back.
    both = torch.tensor([[0.1, 3.0, 0.2, 2.9, -5.0]])
    kept = filter_logits(both, 1.0, top_k=3, top_p=0.9)
    assert torch.equal(kept, torch.where(torch.tensor([[False, True, False, True, False]]), both, ninf))


def test_temperature_zero_is_the_argmax_of_each_row():
    logits = torch.tensor([[0.0, 5.0, 1.0], [2.0, -1.0, 1.0]])
    assert sample(logits, temperature=0).tolist() == [[1], [0]]
