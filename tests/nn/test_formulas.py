"""The maths in nn against closed forms, for what the equality tests between paths cannot see:
attention in half precision (softmax over the keys, in fp32), dropout on the attention weights, a
fully masked query, the masks' device, and the MLP's options (biases, dropout, the exact GELU)."""
import math

import torch
import torch.nn.functional as F

from anyformer.nn import MLP
from anyformer.nn.functional import attention_explicit, causal_mask


def qkv(dtype=torch.float32, b=2, h=2, n=5, d=8):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(b, h, n, d, generator=g).to(dtype) for _ in range(3)]


def reference(q, k, v):
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = scores.softmax(-1)
    return w @ v.double(), w


def test_half_precision_attention_takes_its_softmax_over_the_keys_in_fp32():
    q, k, v = qkv(torch.bfloat16)
    out, weights = attention_explicit(q, k, v)
    ref_out, ref_w = reference(q, k, v)
    assert weights.dtype == torch.bfloat16 and out.dtype == torch.bfloat16
    assert torch.allclose(weights.double(), ref_w, atol=1e-2)
    assert torch.allclose(weights.double().sum(-1), torch.ones(2, 2, 5, dtype=torch.float64), atol=1e-2)
    assert torch.allclose(out.double(), ref_out, atol=3e-2)


def test_fp32_attention_is_the_closed_form():
    q, k, v = qkv()
    out, weights = attention_explicit(q, k.transpose(-2, -1).contiguous().transpose(-2, -1), v)  # strided keys too
    ref_out, ref_w = reference(q, k, v)
    assert torch.allclose(weights.double(), ref_w, atol=1e-6) and torch.allclose(out.double(), ref_out, atol=1e-5)


def test_dropout_on_the_weights_zeroes_a_share_and_rescales_the_rest_in_training_only():
    q, k, v = qkv(n=64)
    torch.manual_seed(1)
    out, weights = attention_explicit(q, k, v, dropout=0.5, training=True)
    torch.manual_seed(1)
    dropped = F.dropout(weights, 0.5, True)
    assert torch.allclose(out, dropped @ v, atol=1e-6)
    zeroed = (dropped == 0).double().mean().item()
    assert 0.45 < zeroed < 0.55 and torch.allclose(dropped[dropped != 0], 2 * weights[dropped != 0])
    evaluated, _ = attention_explicit(q, k, v, dropout=0.5, training=False)
    assert torch.allclose(evaluated, reference(q, k, v)[0].float(), atol=1e-5)


def test_a_query_that_may_see_no_key_attends_to_nothing():
    q, k, v = qkv(b=1, h=1, n=3)
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, False]])
    out, weights = attention_explicit(q, k, v, mask=mask)
    assert torch.equal(out[0, 0, 1], torch.zeros(8)) and torch.equal(weights[0, 0, 1], torch.zeros(3))
    assert torch.isfinite(out).all() and weights[0, 0, 0, 2] == 0 and weights[0, 0, 2, 0] == 1


def test_the_causal_mask_is_bottom_right_aligned_on_the_device_asked():
    assert torch.equal(causal_mask(2, 4, torch.device("cpu")),
                       torch.tensor([[True, True, True, False], [True, True, True, True]]))
    assert causal_mask(2, 4, torch.device("meta")).device.type == "meta"


def test_the_mlp_has_biases_unless_told_and_its_default_gelu_is_exact():
    with_bias, without = MLP(4, 8, layers=2), MLP(4, 8, layers=2, bias=False)
    assert all(m.bias is not None for m in (with_bias.fc1, with_bias.fc2, *with_bias.hidden))
    assert all(m.bias is None for m in (without.fc1, without.fc2, *without.hidden))
    x = torch.randn(3, 4)
    h = F.gelu(F.linear(x, with_bias.fc1.weight, with_bias.fc1.bias))  # erf, not tanh
    h = F.gelu(F.linear(h, with_bias.hidden[0].weight, with_bias.hidden[0].bias))
    assert torch.allclose(with_bias(x), F.linear(h, with_bias.fc2.weight, with_bias.fc2.bias), atol=1e-6)


def test_mlp_dropout_acts_in_training_on_the_hidden_activations_only():
    torch.manual_seed(0)
    mlp = MLP(16, 256, dropout=0.5)
    x = torch.randn(4, 16)
    plain = F.linear(F.gelu(mlp.fc1(x)), mlp.fc2.weight, mlp.fc2.bias)
    mlp.eval()
    assert torch.allclose(mlp(x), plain, atol=1e-6)
    mlp.train()
    torch.manual_seed(3)
    a = mlp(x)
    torch.manual_seed(3)
    assert torch.equal(a, mlp(x)) and not torch.allclose(a, plain, atol=1e-3)
    assert MLP(16, 256, dropout=0.0).drop is None


def test_the_sinusoids_are_vaswani_et_al_s():
    from anyformer.nn.positions import sinusoidal_1d
    table = sinusoidal_1d(6, 8)
    pos, i = torch.arange(6.0)[:, None], torch.arange(0, 8, 2)
    angle = pos / 10000 ** (i / 8)
    assert torch.allclose(table[:, 0::2], torch.sin(angle), atol=1e-6)
    assert torch.allclose(table[:, 1::2], torch.cos(angle), atol=1e-6)


def test_positions_are_added_and_fixed_tables_stay_out_of_the_weights():
    from anyformer.nn import LearnedPosition
    from anyformer.nn.positions import RotaryEmbedding, SinusoidalPosition
    torch.manual_seed(0)
    learned = LearnedPosition(512, 64)
    assert abs(learned.pos_embed.std().item() - 0.02) < 0.002  # drawn with std 0.02, as timm and GPT-2
    x = torch.randn(2, 10, 64)
    assert torch.equal(learned(x, offset=3), x + learned.pos_embed[:, 3:13])
    fixed = SinusoidalPosition(12, 8, prefix=2)
    assert torch.equal(fixed(torch.zeros(1, 12, 8))[0, :2], torch.zeros(2, 8))  # the class token's zero vector
    assert list(fixed.state_dict()) == [] and list(RotaryEmbedding(8).state_dict()) == []
