"""Attention: Turner (2023)'s maths as properties, and the two paths held equal."""
import pytest
import torch

from anyformer.nn import MultiHeadAttention, Transformer, attention_explicit, attention_weights


def _mha(impl, **kw):
    torch.manual_seed(1)
    return MultiHeadAttention(32, 4, impl=impl, **kw)


def weights_of(m, *args, **kwargs):
    """(output, weights) of one attention call, the weights taken by a weights hook."""
    got = []
    handle = m.register_weights_hook(got.append)
    try:
        y = m(*args, **kwargs)
    finally:
        handle.remove()
    assert isinstance(y, torch.Tensor) and len(got) == 1
    m(*args, **kwargs)
    assert len(got) == 1  # removed: the next call hands nothing over
    return y, got[0]


def test_weights_are_a_distribution_over_keys():
    m = _mha("fused")  # a weights hook takes the explicit path whatever the layer's impl
    y, w = weights_of(m, torch.randn(3, 7, 32))
    assert w.shape == (3, 4, 7, 7)
    assert (w >= 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 4, 7))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_fused_and_explicit_agree_forward_and_backward(causal, masked):
    x = torch.randn(2, 9, 32, requires_grad=True)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 6:] = False
    outs, grads = [], []
    for impl in ("fused", "explicit"):
        m = _mha(impl)
        y = m(x, causal=causal, mask=mask if masked else None)
        y.pow(2).sum().backward()
        outs.append(y.detach())
        grads.append((x.grad.clone(), m.qkv.weight.grad.clone()))
        x.grad = None
    torch.testing.assert_close(outs[0], outs[1], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(grads[0][0], grads[1][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grads[0][1], grads[1][1], atol=1e-5, rtol=1e-5)


def test_gradcheck_float64():
    q, k, v = (torch.randn(1, 2, 5, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradcheck(lambda q, k, v: attention_explicit(q, k, v, causal=True)[0], (q, k, v))
    m = MultiHeadAttention(8, 2, impl="fused").double()
    x = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: m(x), (x,))


def test_causal_output_ignores_the_future():
    m = _mha("auto")
    x = torch.randn(1, 10, 32)
    y = m(x, causal=True)
    for t in range(9):
        x2 = x.clone()
        x2[:, t + 1:] = torch.randn_like(x2[:, t + 1:])
        y2 = m(x2, causal=True)
        torch.testing.assert_close(y2[:, : t + 1], y[:, : t + 1])
        assert not torch.allclose(y2[:, t + 1:], y[:, t + 1:])


def test_key_padding_mask_hides_keys():
    m = _mha("explicit")
    x = torch.randn(1, 6, 32)
    mask = torch.tensor([[True, True, True, True, False, False]])
    y, w = weights_of(m, x, mask=mask)
    assert (w[..., 4:] == 0).all()
    x2 = x.clone()
    x2[:, 4:] = 5 * torch.randn(1, 2, 32)
    y2 = m(x2, mask=mask)
    torch.testing.assert_close(y2[:, :4], y[:, :4])


def test_cross_attention_attends_to_the_other_sequence_only():
    m = MultiHeadAttention(32, 4, cross=True, context_width=16, impl="explicit")
    x, ctx = torch.randn(2, 5, 32), torch.randn(2, 3, 16)
    y, w = weights_of(m, x, ctx)
    assert w.shape == (2, 4, 5, 3)  # queries from x, keys from the context alone
    y_other = m(x, torch.randn(2, 3, 16))
    assert not torch.allclose(y, y_other)
    # A query's output depends on the context and its own token only, not on the other queries.
    x2 = x.clone()
    x2[:, 1:] = torch.randn(2, 4, 32)
    y2 = m(x2, ctx)
    torch.testing.assert_close(y2[:, 0], y[:, 0])


def test_return_attention_only_layers_asked():
    torch.manual_seed(0)
    trunk = Transformer(width=32, depth=4, heads=4, impl="fused").eval()
    x = torch.randn(2, 6, 32)
    y_all, attn_all = trunk(x, return_attention=True)
    assert len(attn_all) == 4
    y_some, attn_some = trunk(x, return_attention=[3, 1])
    assert len(attn_some) == 2
    torch.testing.assert_close(attn_some[0], attn_all[3])
    torch.testing.assert_close(attn_some[1], attn_all[1])
    torch.testing.assert_close(y_some, y_all, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(trunk(x), y_all, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match=r"attention layers must be ints in \[-4, 4\); got 4"):
        trunk(x, return_attention=[4])
    # the public shorthand is the hook around a plain call
    with attention_weights(trunk, [3, 1]) as hooked:
        y_hook = trunk(x)
    assert torch.equal(y_hook, y_some) and all(map(torch.equal, hooked, attn_some))
    assert isinstance(trunk(x, return_attention=False), torch.Tensor)
    assert all(not block.attn.hooks_here() for block in trunk.blocks)  # the hooks left with the block


def test_the_hook_can_hand_each_layer_over_instead_of_keeping_it():
    trunk = Transformer(width=32, depth=3, heads=4).eval()
    x = torch.randn(2, 6, 32)
    y, kept = trunk(x, return_attention=[2, 0])
    handed = []
    with attention_weights(trunk, [2, 0], on_layer=lambda i, w: handed.append((i, w))) as none_kept:
        y2 = trunk(x)
    assert none_kept == [] and torch.equal(y2, y)
    assert [i for i, _ in handed] == [0, 2]  # in the order computed
    torch.testing.assert_close(handed[0][1], kept[1])
    torch.testing.assert_close(handed[1][1], kept[0])


@pytest.mark.parametrize("layers", [False, None])
def test_asking_for_no_layers_hooks_none(layers):
    """`attention_weights(model, False)` (or None) is a context that asks nothing: no hook on any
    layer, the weights list empty, the forward as without it."""
    trunk = Transformer(width=16, depth=2, heads=2).eval()
    x = torch.randn(1, 4, 16)
    with attention_weights(trunk, layers) as weights:
        assert all(not block.attn.hooks_here() for block in trunk.blocks)
        y = trunk(x)
    assert weights == [] and torch.equal(y, trunk(x))


def test_only_the_asked_layer_takes_the_explicit_path(monkeypatch):
    import anyformer.nn.attention as att
    calls = []
    real = att.attention_explicit
    monkeypatch.setattr(att, "attention_explicit", lambda *a, **k: calls.append(1) or real(*a, **k))
    trunk = Transformer(width=32, depth=4, heads=4, impl="fused")
    trunk(torch.randn(1, 5, 32), return_attention=[2])
    assert len(calls) == 1


def test_the_layer_calls_its_attention_function_eager_and_traced():
    """Which attention function runs is the layer's `attend` attribute, set before it runs: eager
    calls and a traced graph (torch.export, as torch.compile) both take it; SDPA by default."""
    from anyformer.nn.attend import explicit, sdpa
    layer = MultiHeadAttention(16, 2).eval()
    x = torch.randn(2, 5, 16)
    assert layer.attend is sdpa and MultiHeadAttention(16, 2, impl="explicit").attend is explicit
    with torch.no_grad():
        assert "scaled_dot_product_attention" in torch.export.export(layer, (x,)).graph_module.code
        called = []
        layer.attend = lambda *a: called.append(1) or explicit(*a)
        want = layer(x)
        assert called == [1]
        layer.attend = explicit
        graph = torch.export.export(layer, (x,)).graph_module.code
        assert "softmax" in graph and "scaled_dot_product_attention" not in graph
        torch.testing.assert_close(layer(x), want, rtol=0, atol=0)
