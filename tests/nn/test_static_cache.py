"""The cache of a generation (`KVCache`: every layer's keys and values, one position, written at it
by `update`), positions read at a position tensor, and the products-and-sums forms the layers take
under torch.compile on the CPU, each against the stock computation."""
import pytest
import torch
import torch.nn.functional as F

from anyformer.nn import KVCache, LearnedPosition, SinusoidalPosition
from anyformer.nn.attend import by_sums
from anyformer.nn.attention import MultiHeadAttention
from anyformer.plan.layers import rowwise_linear
from anyformer.nn.positions import RotaryEmbedding


def test_update_stores_each_layer_at_the_position_and_masks_what_comes_after(monkeypatch):
    """Under torch.compile (stood in for) each update gives the layer's whole buffer and a mask over it."""
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    cache = KVCache(2, 2, 3, 4, 8, torch.float32, "cpu")  # 2 layers
    k, v = torch.randn(2, 3, 2, 4), torch.randn(2, 3, 2, 4)
    keys, values, visible = cache.update(0, k, v)
    assert keys is cache.k[0] and values is cache.v[0] and keys.shape == (2, 3, 8, 4)  # layer 0's whole buffer
    assert torch.equal(keys[:, :, :2], k) and torch.equal(values[:, :, :2], v) and not cache.k[1].any()
    assert visible.tolist() == [[j <= 0 for j in range(8)], [j <= 1 for j in range(8)]]
    assert int(cache.position) == 0  # moved on by the last layer only
    _, _, visible = cache.update(1, 2 * k, 2 * v)
    assert int(cache.position) == 2 and torch.equal(cache.k[1][:, :, :2], 2 * k) and visible.shape == (2, 8)
    k2 = torch.randn(2, 3, 1, 4)
    for layer in (0, 1):
        keys, _, visible = cache.update(layer, k2, k2)
    assert int(cache.position) == 3 and torch.equal(keys[:, :, 2:3], k2) and torch.equal(cache.k[0][:, :, :2], k)
    assert visible.tolist() == [[j <= 2 for j in range(8)]]
    assert not any(t[:, :, 3:].any() for t in cache.k + cache.v)
    cache.reset()
    assert int(cache.position) == 0 and not any(t.any() for t in cache.k + cache.v)


def test_eager_on_the_cpu_an_update_gives_the_positions_written_so_far():
    """The same writes, eager: views of the buffers cut after the last position written, and the mask
    cut with them (what attention reads: as many keys as tokens came); one new token sees them all."""
    cache = KVCache(2, 2, 3, 4, 8, torch.float32, "cpu")
    k = torch.randn(2, 3, 2, 4)
    keys, values, visible = cache.update(0, k, 2 * k)
    assert keys.shape == values.shape == (2, 3, 2, 4) and keys.data_ptr() == cache.k[0].data_ptr()
    assert torch.equal(keys, k) and torch.equal(values, 2 * k) and visible.tolist() == [[True, False], [True, True]]
    cache.update(1, k, k)
    k2 = torch.randn(2, 3, 1, 4)
    keys, _, visible = cache.update(0, k2, k2)
    assert keys.shape == (2, 3, 3, 4) and torch.equal(keys[:, :, 2:], k2) and visible is None  # one token: sees all
    assert int(cache.position) == 2  # layer 1, the last, has not written yet


@pytest.mark.parametrize("compiling", [False, True])
def test_update_casts_to_the_caches_precision(monkeypatch, compiling):
    """Keys and values in a lower precision (autocast's projections) are written in the cache's, eager
    and under torch.compile (stood in for), where index_copy_ would refuse another dtype."""
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: compiling)
    cache = KVCache(1, 1, 1, 2, 4, torch.float32, "cpu")
    cache.position.fill_(1)
    ones = torch.ones(1, 1, 1, 2, dtype=torch.bfloat16)
    cache.update(0, ones, 2 * ones)
    assert cache.k[0].dtype == cache.v[0].dtype == torch.float32
    assert cache.k[0][0, 0, 1].tolist() == [1.0, 1.0] and cache.v[0][0, 0, 1].tolist() == [2.0, 2.0]


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
def test_attention_over_the_cache_is_attention_over_the_tokens_so_far(impl):
    """Every attention function of the layer: through the cache (its whole buffer, masked), a prompt
    and then one token give the uncached causal layer's outputs."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 2, rotary=RotaryEmbedding(8, 32), impl="auto" if impl == "sums" else impl).eval()
    if impl == "sums":
        attn.attend = by_sums
    x = torch.randn(1, 6, 16)
    cache = KVCache(1, 1, 2, 8, 32, torch.float32, "cpu")
    with torch.no_grad():
        got = torch.cat([attn(x[:, :5], causal=True, cache=cache), attn(x[:, 5:], causal=True, cache=cache)], 1)
        torch.testing.assert_close(got, attn(x, causal=True), rtol=1e-5, atol=1e-5)
    assert int(cache.position) == 6
