"""The native kernel as a layer's `attend_packed` (`plan/layers.py` `NativePacked`): a whole
self-attention call on the native kernel where chosen for its kind of call, with the plain layer's
answer, dropout and weights hooks; every call it cannot take whole (a mask, a cache, fewer queries, a
context, rotary positions, too many tokens, the meta device) left to the layer's attention function.

Which kernel ran is seen through conftest's `ran` (the module attributes the layers call, wrapped
to record each call and still run it); torch.compile is stood in for by conftest's `compiling`
(`_is_compiling` answering True, as `torch.compiler.is_compiling` does while dynamo traces)."""
import threading

import pytest
import torch

from anyformer.nn import KVCache, MultiHeadAttention, RotaryEmbedding
from anyformer.plan.decisions.common import _MAX_LEN
from anyformer.plan.layers import NativePacked
from tests.conftest import skip_unless_runnable

from .layer_calls import TOL


# --- attention ------------------------------------------------------------------------------------------
def _attention_pair(width=32, heads=2, native=True, native_training=False, **kw):
    """A plain attention layer and one with its weights whose packed calls go to the native kernel
    as chosen."""
    ref = MultiHeadAttention(width, heads, **kw)
    planned = MultiHeadAttention(width, heads, **kw)
    planned.load_state_dict(ref.state_dict())
    planned.attend_packed = NativePacked(native, native_training)
    return ref, planned


@pytest.mark.parametrize("causal", [None, False, True])
def test_a_whole_self_attention_call_runs_on_the_native_kernel(ran, causal):
    """Without gradients, a layer chosen for it computes its projection's attention natively, with
    the layer's answer; `causal` omitted is False."""
    skip_unless_runnable("attention=native")
    ref, planned = _attention_pair()
    x = torch.randn(2, 7, 32)
    kw = {} if causal is None else {"causal": causal}
    with torch.no_grad():
        y = planned(x, **kw)
        assert ran == ["attention"]
        torch.testing.assert_close(y, ref(x, **kw), **TOL)


def test_a_training_call_runs_natively_where_chosen_for_training(ran):
    skip_unless_runnable("attention=native")
    ref, planned = _attention_pair(native=False, native_training=True)
    x = torch.randn(2, 7, 32)
    out = []
    for layer in (planned, ref):
        xi = x.clone().requires_grad_()
        y = layer(xi, causal=True)
        y.square().sum().backward()
        out.append((y.detach(), xi.grad, layer.qkv.weight.grad))
    assert ran == ["attention"]
    for a, b in zip(*out):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_an_autocast_training_call_runs_natively_in_fp32_and_hands_back_bf16(ran):
    """Under bf16 autocast (the default recipe's on CPUs with bf16) the packed projection comes in bf16:
    the kernel computes its attention in fp32 and hands the heads back in bf16, close to the plain
    layer's bf16 attention, gradients included."""
    skip_unless_runnable("attention=native")
    ref, planned = _attention_pair(native=False, native_training=True)
    x = torch.randn(2, 7, 32)
    out = []
    for layer in (planned, ref):
        xi = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = layer(xi)
        assert y.dtype == torch.bfloat16
        y.float().square().sum().backward()
        out.append((y.detach().float(), xi.grad, layer.qkv.weight.grad))
    assert ran == ["attention"]
    for a, b in zip(*out):
        torch.testing.assert_close(a, b, rtol=5e-2, atol=5e-2)


@pytest.mark.parametrize("native, native_training, x_grad, frozen, grad_mode, expected", [
    (True, False, False, False, False, ["attention"]),   # no gradients: `native`
    (False, True, False, False, False, []),
    (False, True, True, False, True, ["attention"]),     # the input wants one: `native_training`
    (True, False, True, False, True, []),
    (True, False, False, False, True, []),               # the weights want one: a training call
    (True, False, True, True, True, []),                 # the input alone: a training call too
    (False, True, True, True, True, ["attention"]),
    (True, False, False, True, True, ["attention"]),     # nothing wants one: `native`
    (False, False, False, False, False, []),             # chosen for neither
    (False, False, True, False, True, []),
])
def test_the_choice_read_is_the_calls_kind(ran, native, native_training, x_grad, frozen, grad_mode, expected):
    skip_unless_runnable("attention=native")
    ref, planned = _attention_pair(native=native, native_training=native_training)
    if frozen:
        for layer in (ref, planned):
            layer.requires_grad_(False)
    x = torch.randn(2, 5, 32, requires_grad=x_grad)
    with torch.set_grad_enabled(grad_mode):
        y = planned(x)
        torch.testing.assert_close(y, ref(x), **TOL)
    assert ran == expected


@pytest.mark.parametrize("training, attn_dropout, expected", [
    (True, 0.0, ["attention"]), (True, 0.1, []), (False, 0.1, ["attention"])])
def test_attention_dropout_in_training_keeps_the_layers_own_path(ran, training, attn_dropout, expected):
    skip_unless_runnable("attention=native")
    ref, planned = _attention_pair(native=True, native_training=True, attn_dropout=attn_dropout)
    ref.train(training), planned.train(training)
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        y = planned(x)
    assert ran == expected
    if not (training and attn_dropout):
        with torch.no_grad():
            torch.testing.assert_close(y, ref(x), **TOL)


def test_projection_dropout_applies_after_the_native_kernel(ran):
    """The same draws as the plain layer's: attention takes none, the output dropout the same."""
    skip_unless_runnable("attention=native")
    ref, planned = _attention_pair(native=True, native_training=True, proj_dropout=0.5)
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        torch.manual_seed(1)
        y = planned(x)
        torch.manual_seed(1)
        y_ref = ref(x)
    assert ran == ["attention"]
    assert (y == 0).float().mean() > 0.3  # half the outputs dropped (the rest scaled by 2)
    torch.testing.assert_close(y, y_ref, **TOL)


def test_a_weights_hook_of_another_thread_leaves_this_threads_calls_native(ran):
    skip_unless_runnable("attention=native")
    ref, planned = _attention_pair()
    theirs, mine = [], []
    t = threading.Thread(target=lambda: planned.register_weights_hook(theirs.append))
    t.start()
    t.join()
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        torch.testing.assert_close(planned(x), ref(x), **TOL)
        assert ran == ["attention"] and theirs == []
        planned.register_weights_hook(mine.append)  # this thread's hook: the weights written out
        torch.testing.assert_close(planned(x), ref(x), **TOL)
    assert ran == ["attention"] and theirs == [] and len(mine) == 1 and mine[0].shape == (2, 2, 5, 5)


def test_the_native_kernel_takes_up_to_max_len_tokens(ran):
    skip_unless_runnable("attention=native")
    ref, planned = _attention_pair(width=16, heads=1)
    with torch.no_grad():
        for n, expected in ((_MAX_LEN, ["attention"]), (_MAX_LEN + 1, [])):
            ran.clear()
            x = torch.randn(1, n, 16)
            y = planned(x)
            assert ran == expected, n
            torch.testing.assert_close(y, ref(x), rtol=1e-4, atol=1e-5)


def test_a_layer_on_the_meta_device_keeps_its_own_path(ran):
    """Shape inference on the meta device (a model built before its weights): the kernel takes CPU
    tensors only."""
    _, planned = _attention_pair()
    planned.to("meta")
    with torch.no_grad():
        y = planned(torch.randn(2, 5, 32, device="meta"))
    assert y.shape == (2, 5, 32) and y.device.type == "meta" and ran == []


@pytest.mark.parametrize("kind", ["mask", "cache", "cache at a position", "queries", "cross", "rotary"])
def test_calls_it_cannot_take_whole_are_multiheadattentions_own(ran, kind):
    """A padding mask, a cache (at the next position or a given one), fewer queries, a context, rotary
    positions: the plain layer's answer, its cache written the same, and no native call."""
    skip_unless_runnable("attention=native")
    kw = {"cross": {"cross": True, "context_width": 24}, "rotary": {"rotary": RotaryEmbedding(16)}}.get(kind, {})
    ref, planned = _attention_pair(**kw)
    x, context = torch.randn(2, 5, 32), torch.randn(2, 6, 24)
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[0, 3:] = False

    def call(layer, cache):
        return {"mask": lambda: layer(x, mask=mask),
                "cache": lambda: layer(x, cache=cache, causal=True),
                "cache at a position": lambda: layer(x, cache=cache, causal=True),
                "queries": lambda: layer(x, queries=1),
                "cross": lambda: layer(x, context),
                "rotary": lambda: layer(x, causal=True)}[kind]()

    caches = [KVCache(1, 2, 2, 16, 12, torch.float32, "cpu") for _ in range(2)]
    for cache in caches if kind == "cache at a position" else ():
        cache.position.fill_(3)
    with torch.no_grad():
        y, y_ref = call(planned, caches[0]), call(ref, caches[1])
    assert ran == []
    torch.testing.assert_close(y, y_ref, **TOL)
    assert y.shape == ((2, 1, 32) if kind == "queries" else (2, 5, 32))
    if kind.startswith("cache"):
        assert int(caches[0].position) == int(caches[1].position) == (8 if kind == "cache at a position" else 5)
        torch.testing.assert_close(caches[0].k, caches[1].k, rtol=0, atol=0)
