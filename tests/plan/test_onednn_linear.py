"""The plan's linear layer on oneDNN (`plan.layers.PlannedLinear`, what `prepare` swaps in where oneDNN
measured faster): the same maths as nn.Linear."""
import pytest
import torch
import torch.nn.functional as F

from anyformer.plan import layers as linear_module
from anyformer.plan.layers import PlannedLinear


def Linear(in_features: int, out_features: int) -> PlannedLinear:
    """A planned linear layer on oneDNN for every kind of call, as prepare leaves one where it won."""
    layer = PlannedLinear(in_features, out_features)
    layer.kernel = layer.few_rows_kernel = layer.training_kernel = "onednn"
    return layer


def _onednn(x, w, b):
    """`layers.linear` for a layer on oneDNN."""
    return linear_module.linear(x, w, b, Linear(1, 1))


def _grads(fn, x, w, b):
    for t in (x, w, b):
        t.grad = None
    y = fn(x, w, b)
    y.backward(torch.linspace(-1, 1, y.numel()).view_as(y))
    return y.detach(), [t.grad.clone() for t in (x, w, b)]


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "expanded"])
def test_linear_matches_f_linear_forward_and_backward(layout):
    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, 8, generator=g)
    x = {"contiguous": base, "transposed": base.transpose(0, 1).contiguous().transpose(0, 1),
         "expanded": base[:1].expand(4, 6, 8)}[layout].detach().requires_grad_()
    w = torch.randn(5, 8, generator=g, requires_grad=True)
    b = torch.randn(5, generator=g, requires_grad=True)
    if linear_module._ONEDNN:  # this torch build has oneDNN: the custom path is what is tested
        assert type(_onednn(x, w, b).grad_fn).__name__ == "OneDNNLinearBackward"
    ours, ours_g = _grads(_onednn, x, w, b)
    ref, ref_g = _grads(F.linear, x, w, b)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)
    for a, r in zip(ours_g, ref_g):
        torch.testing.assert_close(a, r, atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # the inference path
        torch.testing.assert_close(_onednn(x, w, b), ref, atol=1e-5, rtol=1e-5)


def test_linear_gradients_to_the_bias_alone_and_to_a_tied_weight():
    layer = Linear(8, 5)
    layer.weight.requires_grad_(False)
    x = torch.randn(3, 8)
    layer(x).sum().backward()
    torch.testing.assert_close(layer.bias.grad, torch.full((5,), 3.0))
    assert layer.weight.grad is None
    # one matrix used twice (an LM head tied to its embedding): both uses add to its gradient
    table = torch.randn(5, 8, requires_grad=True)
    ids = torch.tensor([[0, 3]])
    (_onednn(F.embedding(ids, table), table, None).sum()).backward()
    ours = table.grad.clone()
    table.grad = None
    F.linear(F.embedding(ids, table), table).sum().backward()
    torch.testing.assert_close(ours, table.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
def test_linear_edge_cases_fall_back_or_refuse_clearly():
    layer = Linear(4, 0)  # no outputs: F.linear handles it
    x = torch.randn(2, 4, requires_grad=True)
    layer(x).sum().backward()
    assert x.grad.shape == (2, 4)
    layer = Linear(4, 3).double()  # float64 (gradcheck) takes F.linear
    assert torch.autograd.gradcheck(layer, (torch.randn(2, 4, dtype=torch.float64, requires_grad=True),))
    layer = Linear(4, 3)
    # A gradient penalty (create_graph=True): the oneDNN backward steps aside for the stock products,
    # and the second derivative equals F.linear's.
    x = torch.randn(5, 4, requires_grad=True)

    def penalty_grads(forward):
        (gx,) = torch.autograd.grad(F.gelu(forward(x)).pow(2).sum(), x, create_graph=True)
        layer.zero_grad(set_to_none=True)
        gx.pow(2).sum().backward()
        return layer.weight.grad.clone(), layer.bias.grad.clone()
    ours = penalty_grads(layer)
    stock = penalty_grads(lambda t: F.linear(t, layer.weight, layer.bias))
    for a, b in zip(ours, stock):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # torch.func transforms see F.linear: per-sample gradients work
    per_sample = torch.func.vmap(torch.func.grad(
        lambda w, xi: torch.func.functional_call(layer, {"weight": w, "bias": layer.bias}, (xi,)).sum()),
        in_dims=(None, 0))(layer.weight.detach(), torch.randn(6, 4))
    assert per_sample.shape == (6, 3, 4)


def test_state_dict_is_nn_linears():
    ours, ref = Linear(4, 3), torch.nn.Linear(4, 3)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(2, 4)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-6, rtol=1e-6)
