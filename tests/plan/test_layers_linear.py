"""The planned linear layers (`plan/layers.py`): each call takes the kernel chosen for its kind
(with or without gradients, a few rows or more; under torch.compile `rowwise_linear` for a few rows),
steps aside to F.linear for what a kernel cannot take (other dtypes, empty tensors, a jit tracer),
and computes what F.linear computes; one slow test checks the real compiler takes the branches the
stand-in does.

Which kernel ran is seen through conftest's `ran` (the module attributes the layers call, wrapped
to record each call and still run it); torch.compile is stood in for by conftest's `compiling`
(`_is_compiling` answering True, as `torch.compiler.is_compiling` does while dynamo traces)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from anyformer.nn import LMHead
from anyformer.nn.attend import sdpa
from anyformer.plan import layers
from anyformer.plan.layers import PLANNED, PlannedGELU, PlannedLMHead, plain_fp32_cpu, rowwise_linear, swap
from tests.conftest import skip_unless_runnable

from .layer_calls import TOL, planned_linear, qkv


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
    layer = planned_linear(in_features, 3, kernel="onednn", few="onednn", training="onednn")
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
    layer = planned_linear(8, 3, kernel="onednn", few="onednn", training="onednn")
    attend, log = choice
    q, k, v = qkv(1)
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
    (lambda: planned_linear(few="onednn"), (2, 8), False, False, "onednn"),
    (lambda: planned_linear(few="onednn"), (4, 8), False, False, "onednn"),     # ROWWISE_MAX_ROWS rows: still a few
    (lambda: planned_linear(few="onednn"), (1, 2, 8), False, False, "onednn"),  # 2 rows of 8 in a 3-D input
    (lambda: planned_linear(few="onednn"), (5, 8), False, False, "stock"),
    (lambda: planned_linear(kernel="onednn"), (5, 8), False, False, "onednn"),
    (lambda: planned_linear(kernel="onednn"), (2, 8), False, False, "stock"),
    (lambda: planned_linear(kernel="onednn", few="onednn"), (5, 8), True, False, "onednn"),  # grad mode off: no gradient
    # a training call: the grad mode on, and the input or a parameter wants a gradient
    (lambda: planned_linear(bias=False, training="onednn"), (2, 8), False, True, "onednn"),       # the weight alone
    (lambda: _freeze(planned_linear(training="onednn"), "weight"), (2, 8), False, True, "onednn"),  # the bias alone
    (lambda: _freeze(planned_linear(training="onednn"), "weight", "bias"), (5, 8), True, True, "onednn"),  # the input
    (lambda: _freeze(planned_linear(training="onednn"), "weight", "bias"), (5, 8), False, True, "stock"),  # none
    (lambda: planned_linear(kernel="onednn", few="onednn", training="mixed"), (5, 8), False, True, "mixed"),
    (lambda: planned_linear(kernel="mixed", few="mixed", training="onednn"), (5, 8), False, True, "onednn"),
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
    layer = planned_linear(kernel="stock", few="native")
    x = torch.randn(*shape)
    with torch.no_grad():
        y = layer(x)
    assert ran == expected
    torch.testing.assert_close(y, F.linear(x, layer.weight, layer.bias), **TOL)


def test_a_layer_of_another_dtype_keeps_f_linear_and_its_bias(ran):
    layer = planned_linear(kernel="onednn", few="onednn", training="onednn").double()
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
    layer = planned_linear(in_features, out_features, kernel="onednn", few="onednn")
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
    model = nn.Sequential(planned_linear(8, 8, kernel="onednn", few="onednn", training="onednn"), PlannedGELU())
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
