"""models/generation.py's small parts, each against what it promises: the request checks and their
messages, the window a full cache keeps, the refill of a full cache, and the cache sizes."""
import pytest
import torch

from anyformer.models import generation
from anyformer.models.gpt import GPT, GPTConfig


def tiny_gpt(context: int = 8) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=20, context=context, width=16, depth=2, heads=2)).eval()


@pytest.mark.parametrize("idx, new, temperature, top_k, top_p, message", [
    (torch.zeros(3, dtype=torch.long), 1, 1.0, None, None, r"prompt ids must have shape \(B, T\) with T >= 1, got \(3,\)"),
    (torch.zeros(1, 0, dtype=torch.long), 1, 1.0, None, None, r"T >= 1, got \(1, 0\)"),
    (torch.zeros(1, 2, dtype=torch.long), -1, 1.0, None, None, "max_new_tokens and temperature must be >= 0, got -1, 1.0"),
    (torch.zeros(1, 2, dtype=torch.long), 1, -0.5, None, None, "must be >= 0, got 1, -0.5"),
    (torch.zeros(1, 2, dtype=torch.long), 1, 1.0, 0, None, "top_k must be >= 1 and top_p in \\(0, 1\\]; got top_k=0, top_p=None"),
    (torch.zeros(1, 2, dtype=torch.long), 1, 1.0, None, 0.0, "got top_k=None, top_p=0.0"),
    (torch.zeros(1, 2, dtype=torch.long), 1, 1.0, None, 1.5, "got top_k=None, top_p=1.5"),
])
def test_a_bad_request_is_refused_with_what_was_expected(idx, new, temperature, top_k, top_p, message):
    with pytest.raises(ValueError, match=message):
        generation.check_request(idx, new, temperature, top_k, top_p)


def test_the_edges_of_a_good_request_pass():
    ok = torch.zeros(1, 1, dtype=torch.long)
    for new, temperature, top_k, top_p in ((0, 0.0, 1, 1.0), (5, 2.0, None, 0.01)):
        generation.check_request(ok, new, temperature, top_k, top_p)


@pytest.mark.parametrize("context, keep", [(1, 1), (2, 1), (4, 3), (5, 4), (8, 6), (1024, 768)])
def test_a_full_window_keeps_three_quarters_of_the_context(context, keep):
    assert generation.window_keep(context) == keep


def test_cache_sizes_double_from_64_up_to_the_context():
    gpt = tiny_gpt(context=300)
    assert [generation.cache_length(gpt, n) for n in (1, 64, 65, 128, 129, 299)] == [64, 64, 128, 128, 256, 300]


def test_a_full_cache_is_refilled_with_the_window_and_gives_its_logits():
    gpt = tiny_gpt()
    window = torch.randint(0, 20, (2, 6), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        cache = gpt.new_cache(2, 8)
        gpt(torch.randint(0, 20, (2, 8)), cache=cache)  # full
        logits = generation._slide(gpt, cache, window)
        assert all(c.length == 6 for c in cache)
        torch.testing.assert_close(logits, gpt(window)[:, -1], rtol=1e-5, atol=1e-5)
        step = gpt(window[:, -1:] * 0, cache=cache, last_only=True)[:, -1]  # the next token reads the refill
        torch.testing.assert_close(step, gpt(torch.cat([window, window[:, -1:] * 0], 1))[:, -1], rtol=1e-5, atol=1e-5)


def test_the_eager_decoder_runs_the_models_forward_and_decides_nothing():
    gpt = tiny_gpt()
    decoder = generation.decoder_of(gpt)
    assert decoder is generation.EAGER and not decoder.static
    with torch.inference_mode():
        assert decoder.take_cache(gpt, 1, 5)[0].max_len == 5  # the size asked, not the context
        cache = decoder.take_cache(gpt, 2, 8)
        assert len(cache) == 2 and cache[0].k.shape == (2, 2, 8, 8)
        ids = torch.randint(0, 20, (2, 3))
        gpt(ids, cache=cache)
        step = decoder.step(gpt, ids[:, -1:], cache, 4)
        torch.testing.assert_close(step(ids[:, -1:], cache), gpt(torch.cat([ids, ids[:, -1:]], 1))[:, -1],
                                   rtol=1e-5, atol=1e-5)
        assert cache[0].length == 4
    assert not decoder.compiled(gpt, 2, 8) and not decoder.settle(gpt, 2, 8)
    generation.set_decoder(gpt, None)  # none installed: nothing to remove, and no error
    other = generation.Decoder()
    generation.set_decoder(gpt, other)
    assert generation.decoder_of(gpt) is other
    generation.set_decoder(gpt, None)
    assert generation.decoder_of(gpt) is generation.EAGER
