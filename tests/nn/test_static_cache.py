"""The static cache mode of the layers (a compiled decode step's): `KVCache.update` at a position
tensor, positions read at a position tensor, and the products-and-sums forms the layers take under
torch.compile on the CPU, each against the stock computation."""
import pytest
import torch
import torch.nn.functional as F

from anyformer.nn import KVCache, LearnedPosition, SinusoidalPosition
from anyformer.nn.attend import by_sums
from anyformer.nn.attention import MultiHeadAttention
from anyformer.plan.layers import rowwise_linear
from anyformer.nn.positions import RotaryEmbedding


def test_update_at_an_int_stores_there_and_returns_the_positions_so_far():
    cache = KVCache(2, 3, 4, 8, torch.float32, "cpu")
    k, v = torch.randn(2, 3, 2, 4), torch.randn(2, 3, 2, 4)
    keys, values, visible = cache.update(0, k, v)
    assert visible is None and cache.length == 2 and torch.equal(keys, k) and torch.equal(values, v)
    k2, v2 = torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4)
    keys, values, _ = cache.update(2, k2, v2)
    assert cache.length == 3 and torch.equal(keys, torch.cat([k, k2], 2)) and torch.equal(values, torch.cat([v, v2], 2))
    with pytest.raises(ValueError, match="at most 8 positions; got 3 cached \\+ 6 new"):
        cache.update(3, torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 4))


def test_update_at_a_tensor_stores_at_the_position_and_masks_what_comes_after():
    cache = KVCache(2, 3, 4, 8, torch.float32, "cpu")
    k, v = torch.randn(2, 3, 2, 4), torch.randn(2, 3, 2, 4)
    keys, values, visible = cache.update(torch.tensor(5), k, v)
    assert keys is cache.k and values is cache.v and cache.length == 0  # the length is the caller's
    assert torch.equal(cache.k[:, :, 5:7], k) and torch.equal(cache.v[:, :, 5:7], v)
    assert not cache.k[:, :, :5].any() and not cache.k[:, :, 7:].any()
    assert visible.tolist() == [[j <= 5 for j in range(8)], [j <= 6 for j in range(8)]]
    cache.length = 7
    cache.reset()
    assert cache.length == 0 and not cache.k.any() and not cache.v.any()


def test_update_casts_to_the_caches_precision():
    cache = KVCache(1, 1, 2, 4, torch.float32, "cpu")
    ones = torch.ones(1, 1, 1, 2, dtype=torch.bfloat16)
    cache.update(torch.tensor(1), ones, ones)
    assert cache.k.dtype == torch.float32 and cache.k[0, 0, 1].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("table", [LearnedPosition(16, 8), SinusoidalPosition(16, 8)])
def test_positions_at_a_position_tensor_are_those_at_the_int(table):
    x = torch.randn(2, 3, 8)
    torch.testing.assert_close(table(x, torch.tensor(5)), table(x, 5), rtol=0, atol=0)


def test_rotary_at_a_position_tensor_is_rotary_at_the_int():
    rope, t = RotaryEmbedding(8, 16), torch.randn(2, 3, 2, 8)
    torch.testing.assert_close(rope(t, torch.tensor(9)), rope(t, 9), rtol=0, atol=0)


def test_rowwise_linear_is_f_linear():
    x, w, b = torch.randn(3, 1, 24), torch.randn(10, 24), torch.randn(10)
    torch.testing.assert_close(rowwise_linear(x, w, b), F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rowwise_linear(x, w), F.linear(x, w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("queries", [1, 3])
def test_attention_by_sums_is_sdpa_with_the_mask(queries):
    q, k, v = torch.randn(2, 3, queries, 8), torch.randn(2, 3, 16, 8), torch.randn(2, 3, 16, 8)
    allowed = torch.arange(16) <= (4 + torch.arange(queries))[:, None]
    torch.testing.assert_close(by_sums(q, k, v, allowed, False, 0.0),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=allowed), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", ["auto", "fused", "explicit", "sums"])
def test_attention_over_a_static_cache_is_attention_over_the_appended_one(impl):
    """Every attention function of the layer: the static mode's output (the whole cache, masked)
    equals the eager cache's (the positions so far), for a prompt and then one token."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 2, rotary=RotaryEmbedding(8, 32), impl="auto" if impl == "sums" else impl).eval()
    if impl == "sums":
        attn.attend = by_sums
    x = torch.randn(1, 6, 16)
    grown, static = KVCache(1, 2, 8, 32, torch.float32, "cpu"), KVCache(1, 2, 8, 32, torch.float32, "cpu")
    with torch.no_grad():
        for start, end in ((0, 5), (5, 6)):
            want = attn(x[:, start:end], causal=True, cache=grown)
            got = attn(x[:, start:end], causal=True, cache=static, position=torch.tensor(start))
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_position_needs_a_cache():
    with pytest.raises(ValueError, match="give the cache too"):
        MultiHeadAttention(16, 2)(torch.randn(1, 1, 16), position=torch.tensor(0))
