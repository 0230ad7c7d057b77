"""The trainer's gradient clip against torch's `clip_grad_norm_`, on the gradients of nanoGPT's CPU recipe model.

nanoGPT's CPU recipe (Tiny Shakespeare characters, 4 layers x 4 heads x 128, context 64; bench_nanogpt_recipe.py)
runs 2,000 steps of about 17 ms, each clipped to a norm of 1. A profile of that run put the clip at about 4% of a
step, most of it Python: torch's `clip_grad_norm_` walks the parameters, checks and groups them by device and dtype
on every call. anyformer's `train.optim.clip_grad_norm` runs the same four operations on the one group a plain run
has (so the same bits; tests/train/test_clip.py), and the trainer lists the parameters once. This times both on
the model's 52 gradient tensors, alternated in one process, and checks the bits.

    python benchmarks/bench_clip.py [--rounds 5] [--calls 300] [--isa avx2] [--no-write]
"""
from __future__ import annotations

import argparse
import statistics
import time

from bench_common import RESULTS, add_isa_argument, machine, setup_env, table, write_results

setup_env()

import torch  # noqa: E402  (after setup_env, which may re-execute this process)
from torch import nn  # noqa: E402

from anyformer.models.gpt import GPT, GPTConfig  # noqa: E402
from anyformer.train.optim import clip_grad_norm  # noqa: E402


def _gradients(params: list[nn.Parameter]) -> None:
    torch.manual_seed(1)
    for p in params:
        p.grad = torch.randn_like(p)  # a norm of about 900: every call scales them down


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=300, help="calls timed a round, each one's time kept")
    ap.add_argument("--no-write", action="store_true")
    add_isa_argument(ap)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=65, context=64, width=128, depth=4, heads=4, dropout=0.0, attn_dropout=0.0))
    params = list(model.parameters())

    _gradients(params)
    ours_norm = clip_grad_norm(params, 1.0)
    ours = [p.grad.clone() for p in params]
    _gradients(params)
    torch_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    same = torch.equal(ours_norm, torch_norm) and all(torch.equal(p.grad, g) for p, g in zip(params, ours))

    calls = {"torch clip_grad_norm_(model.parameters())": lambda: nn.utils.clip_grad_norm_(model.parameters(), 1.0),
             "anyformer clip_grad_norm(listed once)": lambda: clip_grad_norm(params, 1.0)}
    times: dict[str, list[float]] = {k: [] for k in calls}
    names = list(calls)
    for r in range(a.rounds):
        for j in range(len(names)):
            name = names[(r + j) % len(names)]
            for _ in range(a.calls):
                t = time.perf_counter()
                calls[name]()
                times[name].append(time.perf_counter() - t)
        print(f"  round {r + 1}/{a.rounds}: " + ", ".join(f"{k} {statistics.median(v[-a.calls:]) * 1e6:.0f} us"
                                                          for k, v in times.items()), flush=True)
    base = statistics.median(times[names[0]])
    rows = [[k, f"{statistics.median(v) * 1e6:.0f}", f"x{base / statistics.median(v):.2f}"] for k, v in times.items()]
    result = table(["clip", "median us a call", "torch's time / this"], rows)
    words = (f"{len(params)} gradient tensors, {sum(p.numel() for p in params):,} numbers; the same norm and "
             f"gradients bit for bit: **{same}**")
    print(result + "\n" + words)
    if not a.no_write:
        facts = {**machine(), "this script": "python benchmarks/bench_clip.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in (("rounds", a.rounds), ("calls", a.calls)))}
        write_results(RESULTS / "clip_grad.md", "Gradient clip: anyformer's against torch's", __doc__.split("\n\n")[1],
                      facts, [("Result", result + "\n\n" + words)])
    if not same:
        raise SystemExit("the two clips differ")


if __name__ == "__main__":
    main()
