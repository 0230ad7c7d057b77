"""What the planned layers' tests build: a planned linear layer with chosen kernels, query, key
and value tensors of a given shape, an attention function that records its calls, the tolerance."""

import torch

from anyformer.nn.attend import sdpa
from anyformer.plan.layers import PlannedLinear

TOL = dict(rtol=1e-5, atol=1e-5)


def planned_linear(in_features=8, out_features=5, *, bias=True, kernel="stock", few="stock", training="stock"):
    """A planned linear layer with these choices, as prepare leaves one; a bias that is not zero."""
    layer = PlannedLinear(in_features, out_features, bias=bias)
    layer.kernel, layer.few_rows_kernel, layer.training_kernel = kernel, few, training
    return layer


def recorded(log, name):
    def attend(q, k, v, mask, causal, dropout):
        log.append((name, mask))
        return sdpa(q, k, v, mask, causal, dropout)
    return attend


def qkv(nq, nk=6, device="cpu", grad=False):
    g = torch.Generator().manual_seed(nq)
    q, k, v = (torch.randn(2, 2, n, 16, generator=g).to(device) for n in (nq, nk, nk))
    return q.requires_grad_(grad), k, v
