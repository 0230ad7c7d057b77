"""Each attention function of nn/attend.py against the closed form softmax(Q K^T / sqrt(d) + mask) V,
with the causal mask aligned bottom-right (N queries are the last N of M keys), a padding mask, both
together, and half-precision inputs (the weights summed in fp32, the output in the inputs' dtype)."""
import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from anyformer.nn.attend import ATTENTION_FUNCTIONS, by_sums, explicit, sdpa
from anyformer.nn.functional import attention_explicit


def qkv(n: int, m: int, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, n, 8, generator=g)
    k, v = torch.randn(2, 3, m, 8, generator=g), torch.randn(2, 3, m, 8, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def closed_form(q, k, v, mask=None, causal=False):
    n, m = q.shape[2], k.shape[2]
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    allowed = torch.ones(n, m, dtype=torch.bool)
    if causal:  # query i stands at position m - n + i and sees keys up to it
        allowed = torch.arange(m)[None, :] <= (m - n + torch.arange(n))[:, None]
    if mask is not None:
        allowed = allowed & mask
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v.double()


PADDING = torch.tensor([True, True, False, True, True, True, False])[None, None, None, :]  # keys 2 and 6 hidden


@pytest.mark.parametrize("name", sorted(ATTENTION_FUNCTIONS))
@pytest.mark.parametrize("n,m", [(1, 7), (2, 7), (4, 7), (7, 7)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_every_attention_function_is_the_closed_form(name, n, m, causal, padded):
    q, k, v = qkv(n, m)
    mask = PADDING if padded else None
    out = ATTENTION_FUNCTIONS[name](q, k, v, mask, causal, 0.0)
    assert out.shape == (2, 3, n, 8) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), closed_form(q, k, v, mask, causal), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attend", [sdpa, explicit, by_sums])
def test_half_precision_inputs_give_half_precision_outputs_near_the_closed_form(attend):
    q, k, v = qkv(2, 300, torch.bfloat16, seed=1)
    mask = PADDING.repeat(1, 1, 1, 43)[..., :300]
    out = attend(q, k, v, mask, True, 0.0)
    assert out.dtype == torch.bfloat16
    assert (out.double() - closed_form(q, k, v, mask, True)).abs().max() < 0.01  # bf16 scores: ~0.004 off


def test_by_sums_takes_the_softmax_and_its_weighted_sum_in_fp32_over_bf16_scores():
    # The scores are products and sums in the inputs' dtype; from there on fp32, rounded once at the end.
    # 300 weights of about 1/300 each would lose most of their digits in a bf16 softmax.
    q, k, v = qkv(1, 300, torch.bfloat16, seed=2)
    scores = (k[:, :, None] * q[:, :, :, None]).sum(-1) * 8 ** -0.5
    expected = (scores.float().softmax(-1) @ v.float()).to(torch.bfloat16)
    torch.testing.assert_close(by_sums(q, k, v, None, False, 0.0), expected, atol=0, rtol=2 ** -8)


@pytest.mark.parametrize("attend", [sdpa, by_sums])
def test_the_causal_mask_is_made_on_the_queries_device(attend):
    # Meta tensors carry shapes only: a mask made on another device would not combine with them.
    q, k, v = (t.to("meta") for t in qkv(3, 7))
    assert attend(q, k, v, PADDING.to("meta"), True, 0.0).device.type == "meta"


def test_the_explicit_form_takes_its_softmax_in_fp32_over_bf16_scores_and_rounds_the_weights_once():
    q, k, v = qkv(3, 300, torch.bfloat16, seed=3)
    scores = (q * (1.0 / math.sqrt(8))) @ k.transpose(-2, -1)
    weights = scores.softmax(dim=-1, dtype=torch.float32).to(torch.bfloat16)
    out, got = attention_explicit(q, k, v)
    assert got.dtype == torch.bfloat16 and torch.equal(got, weights)
    torch.testing.assert_close(out, weights @ v)


def test_the_explicit_form_makes_its_causal_mask_on_the_queries_device():
    q, k, v = (t.to("meta") for t in qkv(3, 7))
    out, weights = attention_explicit(q, k, v, causal=True)
    assert out.device.type == "meta" and weights.shape == (2, 3, 3, 7)


def test_the_explicit_function_drops_attention_weights_when_given_a_rate():
    # attend(..., dropout=p) is a training call: the weights are dropped (and the rest rescaled).
    q, k, v = qkv(4, 64)
    torch.manual_seed(0)
    dropped = explicit(q, k, v, None, False, 0.5)
    torch.manual_seed(0)
    expected = attention_explicit(q, k, v, dropout=0.5, training=True)[0]
    torch.testing.assert_close(dropped, expected)
    assert not torch.allclose(dropped, explicit(q, k, v, None, False, 0.0), atol=1e-3)


class _Copies(TorchDispatchMode):
    """Counts the copies made under it (`contiguous()` of a strided view is one `aten.clone`)."""

    def __init__(self) -> None:
        super().__init__()
        self.copies = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.copies += func in (torch.ops.aten.clone.default, torch.ops.aten.copy_.default)
        return func(*args, **(kwargs or {}))


def _explicit_copies(q, k, v) -> int:
    with _Copies() as mode:
        attention_explicit(q, k, v)
    return mode.copies


def test_the_explicit_form_copies_only_the_blocks_that_are_not_contiguous():
    """Each head's (N, D_h) block contiguous before the products: a layer's q, k and v, views into
    its packed projection (B, N, 3, H, D_h), are copied; a KV cache's first M positions of its
    (B, H, max_len, D_h) buffer, whose blocks already are contiguous, are not (the copy would be the
    whole prefix), nor is one query's, whatever its strides."""
    b, n, h, d = 2, 5, 3, 4
    packed = torch.randn(b, n, 3, h, d).permute(2, 0, 3, 1, 4)  # q, k, v as a layer splits them
    assert _explicit_copies(*packed) == 3
    cache = torch.randn(2, b, h, 16, d)[:, :, :, :7]  # keys and values: 7 of 16 positions written
    assert not cache[0].is_contiguous() and _explicit_copies(packed[0], *cache) == 1
    one_query = torch.randn(b, 1, 3, h, d).permute(2, 0, 3, 1, 4)[0]  # a generation step's (B, H, 1, D_h)
    assert not one_query.is_contiguous() and _explicit_copies(one_query, *cache) == 0
    wide = torch.randn(b, h, n, 2 * d)[..., :d]  # a block's rows d long, stored 2d apart
    assert _explicit_copies(wide, *cache) == 1
    for rows in (n, 2):
        strided = torch.randn(b, h, d, rows).transpose(-2, -1)  # each row's elements `rows` apart
        assert _explicit_copies(strided, *cache) == 1
    torch.testing.assert_close(attention_explicit(*packed)[0], closed_form(*packed).float(), rtol=1e-5, atol=1e-5)
