"""What the tests of `plan.prepare` share: prepare's module itself (the package exports the
function), recorders standing in for the planner's CPU decisions (conftest's `asked` installs
them), a planned attention layer with nothing asked, and the attention case a call is keyed by."""
from __future__ import annotations

import importlib

import torch

from anyformer import plan
from anyformer.nn import MultiHeadAttention

door = importlib.import_module("anyformer.plan.prepare")  # the module (the package exports the function)
AttentionCase = door.AttentionCase
F32 = torch.float32


class Asked:
    """The planner's CPU decisions as prepare's module calls them, recorded; each answered by the
    test's function of the question (by default the stock choice)."""

    def __init__(self) -> None:
        self.linear: list[tuple] = []
        self.gelu: list[tuple] = []
        self.attention: list[tuple] = []
        self.linear_answer = lambda rows, training: "stock"
        self.gelu_answer = lambda numel, training: "stock"
        self.attention_answer = lambda q_len, training: "fused"

    def linear_kernel(self, rows, k, n, dtype, training):
        self.linear.append((rows, k, n, dtype, training))
        return self.linear_answer(rows, training)

    def gelu_kernel(self, numel, approximate, training):
        self.gelu.append((numel, approximate, training))
        return self.gelu_answer(numel, training)

    def attention_kernel(self, batch, heads, q_len, k_len, head_dim, dtype, causal, training, *, masked, layout):
        self.attention.append((batch, heads, q_len, k_len, head_dim, dtype, causal, training, masked, layout))
        return self.attention_answer(q_len, training)


def planned_attention(width: int = 16, heads: int = 2, **kw) -> MultiHeadAttention:
    """A MultiHeadAttention prepared by the plan, nothing asked (example None)."""
    return plan.prepare(MultiHeadAttention(width, heads, **kw).eval())


# ---------------------------------------------------------------------------------------------
# _attention_case: the planner's key for one attention call


def case(batch=3, q_len=5, k_len=5, *, dtype=F32, causal=False, masked=False, layout="packed", dropout=False):
    return AttentionCase(batch, 2, q_len, k_len, 8, dtype, causal, masked, layout, "cpu", dropout)
