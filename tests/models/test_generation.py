"""models/generation.py's small parts, each against what it promises: the request checks and their
messages, the window a full cache keeps, the refill of a full cache, the cache sizes, the one
forward, and the cache and step a generation gets (the eager forward, or a compiled step's)."""
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
        ids = generation._refill(cache, torch.cat([window[:, :1] * 0, window], 1), 6)
        assert torch.equal(ids, window) and int(cache.position) == 0 and not any(t.any() for t in cache.k + cache.v)
        logits = generation.next_logits(gpt, ids, cache)
        assert int(cache.position) == 6
        torch.testing.assert_close(logits, gpt(window)[:, -1], rtol=1e-5, atol=1e-5)
        step = generation.next_logits(gpt, window[:, -1:] * 0, cache)  # the next token reads the refill
        torch.testing.assert_close(step, gpt(torch.cat([window, window[:, -1:] * 0], 1))[:, -1], rtol=1e-5, atol=1e-5)


def test_the_one_forward_gives_the_next_tokens_logits_cached_or_not():
    gpt = tiny_gpt()
    ids = torch.randint(0, 20, (2, 3))
    with torch.inference_mode():
        cache = gpt.new_cache(2, 8)
        torch.testing.assert_close(generation.next_logits(gpt, ids, cache), gpt(ids)[:, -1], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(generation.next_logits(gpt, ids[:, -1:], cache),
                                   gpt(torch.cat([ids, ids[:, -1:]], 1))[:, -1], rtol=1e-5, atol=1e-5)
        assert int(cache.position) == 4
        torch.testing.assert_close(generation.next_logits(gpt, ids, None), gpt(ids)[:, -1], rtol=1e-5, atol=1e-5)


def test_without_a_compiled_step_the_cache_is_sized_to_the_request_and_the_step_is_the_eager_forward():
    gpt = tiny_gpt(context=300)
    with generation._decoding(gpt.train(), 2, 5, use_cache=True) as (cache, step):
        assert not gpt.training  # eval while generating
        assert cache.max_len == 5 and cache.k[0].shape[0] == 2 and step is generation.next_logits
    assert gpt.training  # the mode it came in
    with generation._decoding(gpt, 2, 5, use_cache=False) as (cache, step):
        assert cache is None and step is generation.next_logits


def test_a_compiled_step_serves_its_size_with_the_cache_it_kept():
    """The plan's step for (batch, cache size) runs with the cache the generation before it left (a
    CUDA graph's addresses); one that finds it taken makes its own, and one cache is kept after."""
    gpt = tiny_gpt(context=300)
    calls = []

    def run(model, ids, cache):
        calls.append(cache)
        return generation.next_logits(model, ids, cache)
    compiled = generation.compiled_steps(gpt)[(1, 64)] = generation.CompiledStep(run)
    try:
        with generation._decoding(gpt, 1, 20, use_cache=True) as (first, step):
            assert first.max_len == 64 and step is run and compiled.kept == []
            with generation._decoding(gpt, 1, 30, use_cache=True) as (second, _):
                assert second is not first  # taken: a cache of its own
            assert compiled.kept == [second]
        assert compiled.kept == [second]  # one kept: the first goes
        with generation._decoding(gpt, 1, 40, use_cache=True) as (third, _):
            assert third is second and int(third.position) == 0 and compiled.kept == []
        prompt = torch.randint(0, 20, (1, 4))
        cached = gpt.generate(prompt, 6, temperature=0)
        assert torch.equal(cached, gpt.generate(prompt, 6, temperature=0, use_cache=False))
        assert calls and all(c is third for c in calls)  # the generation ran the step, with the kept cache
        assert not gpt.compiled_decode(2, 20) and gpt.compiled_decode(1, 20)
    finally:
        generation.compiled_steps(gpt).clear()
