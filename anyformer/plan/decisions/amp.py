"""amp=auto: fp32 or bf16 autocast, measured on a block of the model's width."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from .. import planner as _planner
from ..choices import Decision, register
from ..kernels import onednn_linear
from .common import _CALL_FLOPS, _MAX_ROWS, _bucket, _floor_pow2, _positive, _randn, _with_grads
from .linear import linear_kernel

AMP = register(Decision("amp", ("none", "bf16"), "amp=auto on the CPU: fp32 or bf16 autocast", margin=0.2))

def amp_dtype(device: torch.device | str = "cpu", *, width: int = 256, hidden: int | None = None,
              rows: int = 4096, training: bool = True) -> str:
    """amp=auto: "bf16" (autocast) or "none" (fp32). On the CPU, a model-sized MLP step
    (rows x width -> hidden -> width, GELU, forward and backward) is timed both ways, fp32 on the
    linear kernel the plan picks for it; bf16 must win by the amp decision's margin (20%). On CUDA:
    bf16 where the GPU supports it (tensor cores compute it natively). Elsewhere: "none"."""
    device = torch.device(device)
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "none"
    if device.type != "cpu":
        return "none"
    hidden = hidden or 4 * width
    memo = ("amp", width, hidden, rows, training)
    p = _planner._PLANNER
    if (choice := p.lookup(memo)) is not None:
        return choice
    _positive("amp_dtype", width=width, hidden=hidden, rows=rows)
    bucket = _bucket(rows, _MAX_ROWS)
    rep = min(bucket, max(16, _floor_pow2(_CALL_FLOPS / (4 * width * hidden * (3 if training else 1)))))
    fields = {"device": "cpu", "width": width, "hidden": hidden, "rows": bucket, "training": bool(training)}
    # Asked before the measurement starts (a plan does not nest): fp32 runs as the model would.
    fp32_kernels = tuple(linear_kernel(rep, i, o, torch.float32, training) for i, o in ((width, hidden), (hidden, width)))
    return p.decide("amp", fields, lambda: _amp_runs(rep, width, hidden, training, fp32_kernels),
                    memo_key=memo, tolerance=5e-2, measured_with={"rows": rep} if rep != bucket else None)


def _amp_runs(rows: int, width: int, hidden: int, training: bool, kernels: tuple[str, str]) -> dict[str, Callable]:
    g = torch.Generator().manual_seed(0)
    x, dy = _randn(g, rows, width), _randn(g, rows, width)
    w1, b1 = _randn(g, hidden, width, scale=width ** -0.5), _randn(g, hidden, scale=0.1)
    w2, b2 = _randn(g, width, hidden, scale=hidden ** -0.5), _randn(g, width, scale=0.1)
    lin1, lin2 = (onednn_linear if kind == "onednn" else F.linear for kind in kernels)

    def fp32():
        return lin2(F.gelu(lin1(x, w1, b1)), w2, b2)

    def bf16():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)

    if not training:
        return {"none": fp32, "bf16": bf16}
    leaves = (x.requires_grad_(), w1.requires_grad_(), w2.requires_grad_())
    return {"none": _with_grads(fp32, leaves, dy), "bf16": _with_grads(bf16, leaves, dy)}
