"""Parity tests against the reference libraries (timm, transformers, tokenizers), installed in CI
by scripts/install_peers.sh. A missing library fails these tests; it does not skip them."""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import Tensor, nn

from tests.conftest import skip_unless_runnable

# Allowed max |ours - ref|, as a fraction of the reference tensor's scale (max |ref|, at least 1).
# fp32 rounding from another summation order (anyformer's linears run on oneDNN, the references'
# on MKL) stays near 1e-6 of the scale; a conversion mistake (a swapped, transposed or missing
# weight) moves outputs by a sizeable fraction of it.
TOL = 1e-5


def randomize(model: nn.Module, seed: int = 0) -> nn.Module:
    """Random values in every parameter (biases and norms included, unlike a fresh init, so that a
    conversion mixing up biases or norm weights cannot pass)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            owner = name.rpartition(".")[0].rpartition(".")[2]  # the module holding the parameter
            is_norm = "norm" in owner.lower() or owner in ("ln_1", "ln_2", "ln_f")
            if p.dim() == 1 and is_norm and name.endswith("weight"):
                p.copy_(1 + 0.1 * noise)
            else:
                p.copy_(0.05 * noise)
    return model.eval()


def max_diff(a: Tensor, b: Tensor) -> float:
    assert a.shape == b.shape, f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}"
    return (a.detach().float() - b.detach().float()).abs().max().item()


def assert_close(name: str, ours: Tensor, ref: Tensor, tol: float = TOL) -> float:
    """Assert max |ours - ref| <= tol * max(1, max |ref|); print the difference (pytest -s shows it)."""
    d = max_diff(ours, ref)
    scale = max(1.0, ref.detach().float().abs().max().item())
    print(f"[parity] {name}: max abs diff {d:.3e}, scale {scale:.3g} (tolerance {tol:.0e} x scale)")
    assert d <= tol * scale, f"{name}: max abs diff {d:.3e} exceeds {tol:.0e} x scale {scale:.3g}"
    return d


def block_outputs(blocks, take_first: bool = False) -> tuple[list[Tensor], list]:
    """Record each block's output during the next forward; returns (outputs, hook handles)."""
    outs: list[Tensor] = []

    def hook(_module, _inp, out):
        outs.append(out[0] if take_first or isinstance(out, tuple) else out)

    return outs, [b.register_forward_hook(hook) for b in blocks]


def state_dicts_equal(a: dict[str, Tensor], b: dict[str, Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# Every private kernel the speed plan may choose for an fp32 forward on the CPU. The suite runs stock
# kernels (tests/conftest.py); the parity tests also run with each of these forced, since they are
# what users get where the plan measured them faster.
PRIVATE_KERNELS = ["linear=onednn", "attention=native", "gelu=native"]


@contextlib.contextmanager
def private_kernel(model: nn.Module, forced: str) -> Iterator[None]:
    """Inside: `model` prepared by the plan (`plan.prepare`, for one input of its kind) with `forced`
    (e.g. "attention=native") in force over PyTorch's kernels; the plain layers back after. Skips
    where this machine cannot run the kernel; fails if preparing never chose it (the forward must
    use what the test is named after)."""
    from anyformer.plan import forcing, prepare, unprepare
    from anyformer.plan.planner import planner
    skip_unless_runnable(forced)
    with forcing(f"stock,{forced}"), planner().recording() as answers:
        prepare(model, "default")
        try:
            yield
        finally:
            unprepare(model)
    choice = forced.split("=")[1]
    assert choice in answers.values(), f"{forced} was never chosen: the plan answered {answers}"
