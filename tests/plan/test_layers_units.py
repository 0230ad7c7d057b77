"""The planned layers one by one (`plan/layers.py`) and a prepared layer's attention function
(`plan/attention_choice.py`): each call takes the kernel chosen for its kind (with or without
gradients, a few rows or more), steps aside to PyTorch's own for what a kernel cannot take (other
dtypes and devices, empty tensors, tracers), and computes what the plain layer computes.

Which kernel ran is seen through the module attributes the layers call (`layers.onednn_linear`,
`layers.rowwise_linear`, `native.linear_rows`, `native.gelu`, `native.attention_packed`), wrapped to
record each call and still run it. torch.compile is stood in for by `_is_compiling` answering True
(what `torch.compiler.is_compiling` answers while dynamo traces): the branches it selects run
eagerly, and one slow test checks the real compiler takes the same one.
"""
import threading

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from anyformer import plan
from anyformer.nn import MLP, ClassifierHead, KVCache, LMHead, MultiHeadAttention, RotaryEmbedding
from anyformer.nn.attend import sdpa
from anyformer.plan import attention_choice, layers, native
from anyformer.plan.attention_choice import AttentionChoice
from anyformer.plan.decisions.common import _MAX_LEN
from anyformer.plan.layers import (PLANNED, STOCK, PlannedAttention, PlannedGELU, PlannedLinear, PlannedLMHead,
                                   native_gelu_may_run, plain_fp32_cpu, rowwise_linear, swap, token_wise_gelus)
from tests.conftest import skip_unless_runnable
from tests.refused import refused

TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture
def ran(monkeypatch):
    """The private kernels that calls ran on, in order: "onednn", "mixed" (oneDNN with the weight
    gradient on BLAS), "rows" (native.linear_rows), "rowwise" (layers.rowwise_linear), "gelu"
    (native.gelu), "attention" (native.attention_packed); F.linear, F.gelu and SDPA record nothing."""
    log = []

    def watch(owner, attr, name):
        real = getattr(owner, attr)

        def spy(*args, **kwargs):
            log.append(name(args, kwargs) if callable(name) else name)
            return real(*args, **kwargs)
        monkeypatch.setattr(owner, attr, spy)

    watch(layers, "onednn_linear",
          lambda a, kw: "mixed" if kw.get("blas_dw", a[3] if len(a) > 3 else False) else "onednn")
    watch(native, "linear_rows", "rows")
    watch(layers, "rowwise_linear", "rowwise")
    watch(native, "gelu", "gelu")
    watch(native, "attention_packed", "attention")
    return log


@pytest.fixture
def compiling(monkeypatch):
    """Inside torch.compile's tracing, as the layers and the attention function see it."""
    monkeypatch.setattr(layers, "_is_compiling", lambda: True)
    monkeypatch.setattr(attention_choice, "_is_compiling", lambda: True)


def _linear(in_features=8, out_features=5, *, bias=True, kernel="stock", few="stock", training="stock"):
    """A planned linear layer with these choices, as prepare leaves one; a bias that is not zero."""
    layer = PlannedLinear(in_features, out_features, bias=bias)
    layer.kernel, layer.few_rows_kernel, layer.training_kernel = kernel, few, training
    return layer


# --- rowwise_linear: F.linear as a product and a sum ------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 8), (1, 8), (2, 3, 8)])
@pytest.mark.parametrize("bias", [True, False])
def test_rowwise_linear_is_f_linear(shape, bias):
    """Rows of 8 features into 5 outputs: 2-D and 3-D inputs, with a bias and without."""
    g = torch.Generator().manual_seed(len(shape))
    x, w = torch.randn(*shape, generator=g), torch.randn(5, 8, generator=g)
    b = torch.randn(5, generator=g) if bias else None
    y = rowwise_linear(x, w, b)
    assert y.shape == (*shape[:-1], 5)
    torch.testing.assert_close(y, F.linear(x, w, b), **TOL)


# --- linear under torch.compile -----------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
@pytest.mark.parametrize("in_features, shape, grads, rowwise", [
    (8, (2, 8), False, True),
    (8, (4, 8), False, True),      # ROWWISE_MAX_ROWS rows: still a few
    (8, (1, 2, 8), False, True),   # rows counted over every dim but the last
    (1, (1, 1), False, True),      # one row of one feature
    (8, (5, 8), False, False),     # more rows: F.linear
    (8, (2, 8), True, False),      # a training call: F.linear
    (8, (0, 8), False, False),     # no rows: F.linear
])
def test_a_compiled_linear_takes_rowwise_linear_for_a_few_rows_without_gradients(compiling, ran, in_features,
                                                                                  shape, grads, rowwise):
    """Under torch.compile no private kernel runs, whatever the layer's choices: a few rows without
    gradients are `rowwise_linear` (inductor fuses it), the rest F.linear."""
    layer = _linear(in_features, 3, kernel="onednn", few="onednn", training="onednn")
    x = torch.randn(*shape)
    with torch.set_grad_enabled(grads):
        y = layer(x)
    assert ran == (["rowwise"] if rowwise else [])
    torch.testing.assert_close(y, F.linear(x, layer.weight, layer.bias), **TOL)


@pytest.mark.slow
def test_the_real_compiler_takes_the_branches_the_stand_in_does(ran, choice):
    """What the `compiling` fixture assumes: dynamo traces `linear` and AttentionChoice with
    `_is_compiling` True: a few rows are `rowwise_linear`, one query over a static cache's 2-D mask
    is not the function chosen for one query (it is `by_sums`)."""
    torch._dynamo.reset()  # no graph of another test's (or another mutant's) code
    layer = _linear(8, 3, kernel="onednn", few="onednn", training="onednn")
    attend, log = choice
    q, k, v = _qkv(1)
    mask = torch.tensor([[True, True, False, True, False, False]])
    try:
        with torch.no_grad():
            compiled = torch.compile(layer, backend="eager", fullgraph=True)
            for rows, expected in ((2, ["rowwise"]), (6, [])):
                ran.clear()
                x = torch.randn(rows, 8)
                torch.testing.assert_close(compiled(x), F.linear(x, layer.weight, layer.bias), **TOL)
                assert ran == expected, rows
            y = torch.compile(lambda *a: attend(*a, False, 0.0), backend="eager", fullgraph=True)(q, k, v, mask)
            assert log == []
            torch.testing.assert_close(y, sdpa(q, k, v, mask, False, 0.0), **TOL)
    finally:
        torch._dynamo.reset()


# --- linear in eager mode: the kernel of each kind of call -------------------------------------------
def _freeze(layer, *names):
    for name in names:
        getattr(layer, name).requires_grad_(False)
    return layer


@pytest.mark.parametrize("make, shape, x_grad, grad_mode, expected", [
    # no gradients: a few rows on `few_rows_kernel`, more on `kernel`
    (lambda: _linear(few="onednn"), (2, 8), False, False, "onednn"),
    (lambda: _linear(few="onednn"), (4, 8), False, False, "onednn"),     # ROWWISE_MAX_ROWS rows: still a few
    (lambda: _linear(few="onednn"), (1, 2, 8), False, False, "onednn"),  # 2 rows of 8 in a 3-D input
    (lambda: _linear(few="onednn"), (5, 8), False, False, "stock"),
    (lambda: _linear(kernel="onednn"), (5, 8), False, False, "onednn"),
    (lambda: _linear(kernel="onednn"), (2, 8), False, False, "stock"),
    (lambda: _linear(kernel="onednn", few="onednn"), (5, 8), True, False, "onednn"),  # grad mode off: no gradient
    # a training call: the grad mode on, and the input or a parameter wants a gradient
    (lambda: _linear(bias=False, training="onednn"), (2, 8), False, True, "onednn"),       # the weight alone
    (lambda: _freeze(_linear(training="onednn"), "weight"), (2, 8), False, True, "onednn"),  # the bias alone
    (lambda: _freeze(_linear(training="onednn"), "weight", "bias"), (5, 8), True, True, "onednn"),  # the input
    (lambda: _freeze(_linear(training="onednn"), "weight", "bias"), (5, 8), False, True, "stock"),  # none
    (lambda: _linear(kernel="onednn", few="onednn", training="mixed"), (5, 8), False, True, "mixed"),
    (lambda: _linear(kernel="mixed", few="mixed", training="onednn"), (5, 8), False, True, "onednn"),
])
def test_each_kind_of_call_runs_on_the_kernel_chosen_for_it(ran, make, shape, x_grad, grad_mode, expected):
    """The kernel is the one chosen for the kind of call; forward and gradients are F.linear's on each."""
    skip_unless_runnable("linear=onednn")
    layer = make()
    x = torch.randn(*shape, requires_grad=x_grad)
    with torch.set_grad_enabled(grad_mode):
        y = layer(x)
        ref = F.linear(x, layer.weight, layer.bias)
    assert ran == ([] if expected == "stock" else [expected])
    torch.testing.assert_close(y, ref, **TOL)
    wanted = [t for t in (x, layer.weight, layer.bias) if t is not None and t.requires_grad]
    if grad_mode and wanted:
        dy = torch.randn_like(y)
        for got, want in zip(torch.autograd.grad(y, wanted, dy), torch.autograd.grad(ref, wanted, dy)):
            torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("shape, expected", [((1, 8), ["rows"]), ((4, 8), ["rows"]), ((1, 2, 8), ["rows"]),
                                             ((2, 2, 8), ["rows"]), ((5, 8), []), ((3, 2, 8), [])])
def test_linear_rows_takes_at_most_four_rows_however_they_are_shaped(ran, shape, expected):
    """"native" (one pass over the weight) for at most four rows of the last dim's features, counted
    over every other dim; more take F.linear (the layer's `kernel` here)."""
    skip_unless_runnable("linear=native")
    layer = _linear(kernel="stock", few="native")
    x = torch.randn(*shape)
    with torch.no_grad():
        y = layer(x)
    assert ran == expected
    torch.testing.assert_close(y, F.linear(x, layer.weight, layer.bias), **TOL)


def test_a_layer_of_another_dtype_keeps_f_linear_and_its_bias(ran):
    layer = _linear(kernel="onednn", few="onednn", training="onednn").double()
    x = torch.randn(5, 8, dtype=torch.float64)
    assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias)) and ran == []


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
@pytest.mark.parametrize("x_shape, w_shape, dtype, expected", [
    ((2, 4), (3, 4), torch.float32, True),
    ((1, 1), (3, 1), torch.float32, True),   # one element in
    ((2, 1), (1, 1), torch.float32, True),   # a weight of one element
    ((0, 4), (3, 4), torch.float32, False),  # no rows
    ((2, 4), (0, 4), torch.float32, False),  # no outputs
    ((2, 4), (3, 4), torch.float64, False),
    ((2, 4), (3, 4), torch.bfloat16, False),
])
def test_plain_fp32_cpu_is_any_nonempty_fp32_pair_on_the_cpu(x_shape, w_shape, dtype, expected):
    if not layers._ONEDNN:
        expected = False  # without oneDNN no call has another kernel
    x, w = torch.randn(*x_shape, dtype=dtype), nn.Parameter(torch.randn(*w_shape, dtype=dtype))
    assert plain_fp32_cpu(x, w) is expected


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
@pytest.mark.parametrize("in_features, out_features, shape, expected", [
    (1, 3, (1, 1), ["onednn"]), (1, 1, (2, 1), ["onednn"]), (4, 3, (0, 4), [])])
def test_a_layer_on_onednn_takes_it_for_any_nonempty_call(ran, in_features, out_features, shape, expected):
    skip_unless_runnable("linear=onednn")
    layer = _linear(in_features, out_features, kernel="onednn", few="onednn")
    x = torch.randn(*shape)
    with torch.no_grad():
        y = layer(x)
    assert ran == expected
    torch.testing.assert_close(y, F.linear(x, layer.weight, layer.bias), **TOL)


@pytest.mark.filterwarnings("error::torch.jit.TracerWarning", "ignore:`torch.jit.trace:DeprecationWarning")
def test_a_jit_trace_records_pytorchs_operators_not_the_private_kernels(ran):
    """A traced graph is what runs later, anywhere: F.linear and F.gelu, whatever the layers chose;
    and the layers' checks ask about the tracer before they branch on a size (a traced size is a
    tensor: "Converting a tensor to a Python boolean" would warn that the trace may be wrong)."""
    skip_unless_runnable("linear=onednn", "gelu=native")
    model = nn.Sequential(_linear(8, 8, kernel="onednn", few="onednn", training="onednn"), PlannedGELU())
    model[1].native = model[1].native_few = model[1].native_training = True
    x = torch.randn(5, 8)
    traced = torch.jit.trace(model, x, check_trace=False)
    assert ran == []
    ops = {node.kind() for node in traced.inlined_graph.nodes() if not node.kind().startswith("prim::")}
    assert ops == {"aten::linear", "aten::gelu"}
    torch.testing.assert_close(traced(x), F.gelu(F.linear(x, model[0].weight, model[0].bias)), **TOL)


def test_a_planned_lm_head_adds_its_bias(ran):
    head = LMHead(8, 5, bias=True)
    nn.init.normal_(head.bias)
    swap(head, PLANNED)
    assert type(head) is PlannedLMHead
    head.kernel = head.few_rows_kernel = head.training_kernel = "onednn" if layers._ONEDNN else "stock"
    for shape in ((1, 8), (3, 2, 8)):
        x = torch.randn(*shape)
        torch.testing.assert_close(head(x), F.linear(x, head.weight, head.bias), **TOL)  # a training call
        with torch.no_grad():
            torch.testing.assert_close(head(x), F.linear(x, head.weight, head.bias), **TOL)
    head.kernel = head.few_rows_kernel = head.training_kernel = "stock"
    x = torch.randn(2, 8)
    torch.testing.assert_close(head(x), F.linear(x, head.weight, head.bias), **TOL)


# --- GELU -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("x, expected", [
    (torch.randn(3, 4), True), (torch.randn(1), True), (torch.randn(0, 4), False),
    (torch.randn(3, 4, dtype=torch.bfloat16), False), (torch.randn(3, 4, dtype=torch.float64), False),
    (torch.randn(3, 4, device="meta"), False)])
def test_native_gelu_may_run_on_nonempty_fp32_cpu_tensors(x, expected):
    assert native_gelu_may_run(x) is expected


def _gelu(native=False, few=False, training=False):
    """A planned tanh GELU with these choices, as prepare leaves one."""
    act = PlannedGELU(approximate="tanh")
    act.native, act.native_few, act.native_training = native, few, training
    return act


@pytest.mark.parametrize("chosen, shape, x_grad, grad_mode, expected", [
    ({"native": True}, (5, 8), False, False, ["gelu"]),
    ({"native": True}, (2, 8), False, False, []),
    ({"few": True}, (2, 8), False, False, ["gelu"]),
    ({"few": True}, (4, 8), False, False, ["gelu"]),     # ROWWISE_MAX_ROWS rows: still a few
    ({"few": True}, (1, 2, 8), False, False, ["gelu"]),  # 2 rows of 8 in a 3-D input
    ({"few": True}, (5, 8), False, False, []),
    ({"training": True}, (5, 8), True, True, ["gelu"]),
    ({"native": True, "few": True}, (5, 8), True, True, []),
    ({"native": True, "few": True}, (5, 8), False, True, ["gelu"]),  # grad mode on, no gradient wanted
    ({"training": True}, (5, 8), False, True, []),
    ({}, (5, 8), False, False, []),
    ({}, (2, 8), True, True, []),
])
def test_the_gelu_runs_natively_for_the_kinds_of_call_chosen(ran, chosen, shape, x_grad, grad_mode, expected):
    """`native_training` for calls whose input wants a gradient, else `native_few` for a few rows and
    `native` for more; the kernel's answer is F.gelu's, its approximation (tanh) and gradient included."""
    skip_unless_runnable("gelu=native")
    act = _gelu(**chosen)
    x = (torch.randn(*shape) * 3).requires_grad_(x_grad)
    with torch.set_grad_enabled(grad_mode):
        y = act(x)
        ref = F.gelu(x, approximate="tanh")
    assert ran == expected
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-6)
    if x_grad:
        dy = torch.randn_like(y)
        torch.testing.assert_close(torch.autograd.grad(y, x, dy)[0], torch.autograd.grad(ref, x, dy)[0], **TOL)


@pytest.mark.parametrize("x, expected", [
    (torch.randn(4, 8, dtype=torch.bfloat16), []), (torch.randn(0, 8), []), (torch.randn(1, 1), ["gelu"])])
def test_the_gelu_leaves_what_the_kernel_cannot_take_to_f_gelu(ran, x, expected):
    skip_unless_runnable("gelu=native")
    act = _gelu(native=True, few=True, training=True)
    with torch.no_grad():
        y = act(x)
    assert ran == expected
    torch.testing.assert_close(y, F.gelu(x, approximate="tanh"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("grad", [False, True])
def test_a_gelu_of_a_scalar_is_nn_gelus(grad):
    """A 0-dim input is one row of one element, as nn.GELU takes it."""
    act = _gelu(native=True, few=True, training=True)
    x = torch.tensor(1.0, requires_grad=grad)
    with torch.set_grad_enabled(grad):
        torch.testing.assert_close(act(x), nn.GELU(approximate="tanh")(x), rtol=1e-5, atol=1e-6)


# --- attention ------------------------------------------------------------------------------------------
def _attention_pair(width=32, heads=2, native=True, native_training=False, **kw):
    """A plain attention layer and a planned one with its weights and these choices."""
    ref = MultiHeadAttention(width, heads, **kw)
    planned = PlannedAttention(width, heads, **kw)
    planned.load_state_dict(ref.state_dict())
    planned.native, planned.native_training = native, native_training
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


# --- AttentionChoice -----------------------------------------------------------------------------------
def _recorded(log, name):
    def attend(q, k, v, mask, causal, dropout):
        log.append((name, mask))
        return sdpa(q, k, v, mask, causal, dropout)
    return attend


@pytest.fixture
def choice():
    """An AttentionChoice with a recording function per kind of call, and its record."""
    log = []
    kinds = {(False, False): "many", (False, True): "one", (True, False): "many, grads", (True, True): "one, grads"}
    return AttentionChoice({key: _recorded(log, name) for key, name in kinds.items()}), log


def _qkv(nq, nk=6, device="cpu", grad=False):
    g = torch.Generator().manual_seed(nq)
    q, k, v = (torch.randn(2, 2, n, 16, generator=g).to(device) for n in (nq, nk, nk))
    return q.requires_grad_(grad), k, v


@pytest.mark.parametrize("nq, grad, grad_mode, expected", [
    (5, False, True, "many"), (1, False, True, "one"), (5, True, True, "many, grads"),
    (1, True, True, "one, grads"), (5, True, False, "many"), (1, True, False, "one")])
@pytest.mark.parametrize("mask_dims", [None, 2, 4])
def test_an_eager_call_takes_the_function_chosen_for_its_kind(choice, nq, grad, grad_mode, expected, mask_dims):
    """(gradients wanted, one query) picks the function, and it gets the call's own mask: a 2-D one
    (a static cache's) too, outside torch.compile."""
    attend, log = choice
    q, k, v = _qkv(nq, grad=grad)
    mask = {None: None, 2: torch.rand(nq, 6) > 0.3, 4: torch.rand(2, 1, nq, 6) > 0.3}[mask_dims]
    if mask is not None:
        mask[..., 0] = True
    with torch.set_grad_enabled(grad_mode):
        y = attend(q, k, v, mask, False, 0.0)
    assert len(log) == 1 and log[0][0] == expected and log[0][1] is mask
    torch.testing.assert_close(y, sdpa(q, k, v, mask, False, 0.0), rtol=0, atol=0)


def test_a_kind_not_chosen_for_takes_sdpa():
    log = []
    attend = AttentionChoice({(True, False): _recorded(log, "many, grads")})
    q, k, v = _qkv(5)
    torch.testing.assert_close(attend(q, k, v, None, True, 0.0), sdpa(q, k, v, None, True, 0.0), rtol=0, atol=0)
    assert log == []


@pytest.mark.parametrize("grad", [False, True])
def test_one_query_over_a_static_cache_under_compile_is_written_as_sums(compiling, choice, grad):
    """Under torch.compile one query with a 2-D (1, M) mask on the CPU, without dropout, is
    `attend.by_sums`: SDPA's answer, the positions not yet written masked."""
    attend, log = choice
    q, k, v = _qkv(1, grad=grad)
    mask = torch.tensor([[True, True, False, True, False, False]])
    y = attend(q, k, v, mask, False, 0.0)
    assert log == []
    torch.testing.assert_close(y, sdpa(q, k, v, mask, False, 0.0), **TOL)


@pytest.mark.parametrize("nq, mask, dropout, device, expected", [
    (5, "2-D", 0.0, "cpu", "many"),   # more queries
    (1, "4-D", 0.0, "cpu", "one"),    # a padding mask, not a static cache's
    (1, None, 0.0, "cpu", "one"),
    (1, "2-D", 0.1, "cpu", "one"),    # dropout (by_sums has none)
    (1, "2-D", 0.0, "meta", "one"),   # not the CPU
])
def test_other_compiled_calls_take_the_function_chosen(compiling, choice, nq, mask, dropout, device, expected):
    attend, log = choice
    q, k, v = _qkv(nq, device=device)
    m = {None: None, "2-D": torch.ones(nq, 6, dtype=torch.bool, device=device),
         "4-D": torch.ones(2, 1, nq, 6, dtype=torch.bool, device=device)}[mask]
    y = attend(q, k, v, m, False, dropout)
    assert [name for name, _ in log] == [expected] and y.shape == q.shape


# --- swapping the layers in and out ---------------------------------------------------------------------
def test_swap_turns_the_listed_types_and_returns_the_layers_it_turned():
    model = nn.Sequential(MLP(8, 16), nn.Linear(8, 8), nn.GELU(), MultiHeadAttention(8, 2))
    attn = model[3]
    expected = [model[0].fc1, model[0].act, model[0].fc2, model[1], attn, attn.qkv, attn.proj]
    swapped = swap(model, PLANNED)
    assert len(swapped) == len(expected) and all(a is b for a, b in zip(swapped, expected))
    assert [type(m) for m in swapped] == [PlannedLinear, PlannedGELU, PlannedLinear, PlannedLinear,
                                          PlannedAttention, PlannedLinear, PlannedLinear]
    assert type(model[2]) is nn.GELU  # not token-wise: PyTorch's
    back = swap(model, STOCK)
    assert all(a is b for a, b in zip(back, expected)) and type(attn) is MultiHeadAttention


def test_unprepare_gives_back_the_default_attention_function():
    layer = MultiHeadAttention(32, 2)
    with plan.forcing("stock,attention=explicit"):
        plan.prepare(layer, torch.randn(2, 5, 32))
    assert isinstance(layer.attend, AttentionChoice)
    plan.unprepare(layer)
    assert type(layer) is MultiHeadAttention and layer.attend is sdpa


def test_a_classifiers_pre_logits_gelu_is_token_wise():
    head = ClassifierHead(8, 3, hidden=16, activation="gelu")
    assert token_wise_gelus(head) == {id(head.pre_logits[1])}
    swap(head, PLANNED)
    assert type(head.pre_logits[1]) is PlannedGELU and type(head.fc) is PlannedLinear


def test_an_unknown_training_kernel_is_refused_word_for_word():
    refused(ValueError, "training kernel must be one of None, 'stock', 'onednn', 'mixed'; got 'native'",
            lambda: plan.set_training_kernel(nn.Linear(2, 2), "native"))
