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
