"""anyformer's cheaper-mask Dropout: the same maths as nn.Dropout."""
import torch

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
