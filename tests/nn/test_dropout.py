"""anyformer's cheaper-mask Dropout: the same maths as nn.Dropout."""
import torch
import torch.nn.functional as F

from anyformer.nn import Dropout


def test_dropout_keeps_1_minus_p_scaled_and_repeats_with_the_seed():
    drop = Dropout(0.3)
    x = torch.ones(200_000)
    torch.manual_seed(0)
    y = drop(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.005
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / 0.7))
    torch.manual_seed(0)
    torch.testing.assert_close(drop(x), y)
    x = torch.randn(50, requires_grad=True)
    torch.manual_seed(1)
    out = drop(x)
    out.sum().backward()
    torch.testing.assert_close(x.grad, (out != 0).float() / 0.7)
    drop.eval()
    assert torch.equal(drop(x), x)


def test_what_the_cheaper_mask_does_not_take_goes_to_torch_s_dropout():
    from anyformer.nn.dropout import dropout
    x = torch.randn(64, 64).to(torch.bfloat16)  # bf16: uniform draws too coarse for p
    torch.manual_seed(0)
    got = dropout(x, 0.3, True)
    torch.manual_seed(0)
    assert torch.equal(got, F.dropout(x, 0.3, True))
    assert torch.equal(dropout(x, 0.3, False), x)
    assert (dropout(torch.ones(100), 0.5) == 0).any()  # a training call by default
    ones = torch.ones(8, 8)
    assert torch.equal(dropout(ones, 1.0, True), torch.zeros(8, 8))  # p = 1 drops everything, no 0 / 0
    assert dropout(ones, 0.0, True) is ones
    inplace = Dropout(0.5, inplace=True).train()
    y = torch.randn(32, 32)
    expected = y.clone()
    torch.manual_seed(1)
    out = inplace(y)
    torch.manual_seed(1)
    F.dropout(expected, 0.5, True, inplace=True)
    assert out is y and torch.equal(y, expected)  # torch's in-place dropout, as asked
    assert torch.equal(Dropout(0.5, inplace=True).eval()(expected.clone()), expected)
