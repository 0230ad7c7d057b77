"""Where does plain-matmul attention, or anyformer's native kernel, beat SDPA on this CPU? What `impl="auto"` weighs.

One anyformer MultiHeadAttention layer (QKV projection, attention, output projection), timed
with `impl="fused"` (torch's scaled_dot_product_attention) and `impl="explicit"` (matmul,
softmax, matmul), alternating in the same rounds, over sequence length N and head dim, for
training (forward + backward) and inference (inference_mode), fp32 and bf16, with and without
a causal mask; and for generation with a key/value cache ("decode": batch 1, one new token
attending to N cached keys, per call). Tokens per batch are held near 4096 (batch = 4096 // N, at least 1) and the
width at 256 (heads = 256 / head dim), so each cell is a realistic layer of a small model.

Where anyformer's own kernel takes the shape (fp32, head dim 16, 32, 48 or 64, a whole self-attention
projection: anyformer/plan/native.py, built here with the machine's compiler), it runs as a third
contestant, `impl="native"`, in the same rounds; the `fastest` column names the quickest of the three.

A cell's ratio is fused time / explicit time: above 1 the explicit path wins. The script then
prints, per (mode, dtype, causal, head dim), the largest N at which the explicit path still wins
(the crossover). anyformer no longer encodes a crossover: `impl="auto"` asks the speed plan
(anyformer.plan.attention_kernel), which times both paths for each shape on the machine at hand.

    python benchmarks/bench_attention_kernels.py             # full grid (~5 min on a quiet machine); writes results/<processor>/attention_kernels.md
    python benchmarks/bench_attention_kernels.py --quick --no-write
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time

from bench_common import (Contestant, add_isa_argument, alternate,
                          load_average, machine, setup_env, table, wait_for_quiet,
                          write_results, RESULTS)

setup_env()

import torch  # noqa: E402

from anyformer.nn import KVCache, MultiHeadAttention  # noqa: E402
from anyformer.nn.attend import ATTENTION_FUNCTIONS  # noqa: E402
from anyformer.plan.layers import NativePacked  # noqa: E402


def use(layer: MultiHeadAttention, impl: str) -> None:
    """Put `layer` on one path, as `plan.prepare` would: an attention function ("fused": SDPA,
    "explicit"), or the native kernel taking the packed projection whole (the plan's `NativePacked`)."""
    layer.attend_packed = NativePacked(native=True, training=True) if impl == "native" else None
    layer.attend = ATTENTION_FUNCTIONS["fused" if impl == "native" else impl]  # "native": for the calls not taken whole
from anyformer.plan import native  # noqa: E402

TOKENS, WIDTH = 4096, 256
LENGTHS = (16, 32, 50, 64, 128, 197, 256, 512)
DECODE_KEYS = (16, 64, 128, 256, 512, 1024)
DECODE_CALLS = 100  # one call attends one new token; a timed step makes this many
HEAD_DIMS = (16, 64)  # add 32 with --head-dims 16 32 64 (half as long again)


def cell(n: int, head_dim: int, dtype: torch.dtype, train: bool, causal: bool, rounds: int, steps: int):
    torch.manual_seed(0)
    batch = max(1, TOKENS // n)
    layer = MultiHeadAttention(WIDTH, WIDTH // head_dim).to(dtype)
    x = torch.randn(batch, n, WIDTH, dtype=dtype, requires_grad=train)
    grad = torch.randn(batch, n, WIDTH, dtype=dtype)

    def step_of(impl: str):
        def step():
            use(layer, impl)
            if train:
                y = layer(x, causal=causal)
                y.backward(grad)
                x.grad = None
                layer.zero_grad(set_to_none=True)
            else:
                with torch.inference_mode():
                    layer(x, causal=causal)
        return step
    impls = ["fused", "explicit"] + (["native"] if native.supports(dtype, head_dim) and native.library() else [])
    cs = [Contestant(impl, step_of(impl), batch * n, 0.0) for impl in impls]
    alternate(cs, rounds=rounds, steps=steps, verbose=False)
    return batch, cs[0].median, cs[1].median, min(cs[0].times) / min(cs[1].times), cs[2].median if cs[2:] else None


def decode_cell(nk: int, head_dim: int, dtype: torch.dtype, rounds: int, steps: int):
    """Generation with a key/value cache, batch 1: one new query attending to nk cached keys."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(WIDTH, WIDTH // head_dim).to(dtype)
    cache = KVCache(1, 1, WIDTH // head_dim, head_dim, nk, dtype, "cpu")
    cache.k[0].normal_(), cache.v[0].normal_()
    x = torch.randn(1, 1, WIDTH, dtype=dtype)

    def step_of(impl: str):
        def step():
            use(layer, impl)
            with torch.inference_mode():
                for _ in range(DECODE_CALLS):
                    cache.position.fill_(nk - 1)
                    layer(x, causal=True, cache=cache)
        return step
    cs = [Contestant(impl, step_of(impl), DECODE_CALLS, 0.0) for impl in ("fused", "explicit")]
    alternate(cs, rounds=rounds, steps=steps, verbose=False)
    return 1, cs[0].median / DECODE_CALLS, cs[1].median / DECODE_CALLS, min(cs[0].times) / min(cs[1].times), None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    ap.add_argument("--head-dims", type=int, nargs="+", default=list(HEAD_DIMS))
    ap.add_argument("--decode-keys", type=int, nargs="+", default=list(DECODE_KEYS))
    ap.add_argument("--quick", action="store_true", help="a few cells, one round")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--no-wait", action="store_true")
    add_isa_argument(ap)
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.steps, args.lengths, args.head_dims, args.decode_keys = 1, 1, [32, 256], [16, 64], [64]

    load_before = load_average() if args.no_wait else wait_for_quiet()
    facts = machine()
    print(json.dumps(facts, indent=1))
    print(f"load average before: {load_before}", flush=True)
    t0 = time.time()
    rows, crossover = [], {}
    modes = [(train, dtype, causal) for train in ("train", "inference") for dtype in (torch.float32, torch.bfloat16)
             for causal in (False, True)]
    modes += [("decode", dtype, True) for dtype in (torch.float32, torch.bfloat16)]
    for (mode, dtype, causal), hd in itertools.product(modes, args.head_dims):
        key = (mode, str(dtype).replace("torch.", ""), "causal" if causal else "full", hd)
        wins = []
        for n in (args.decode_keys if mode == "decode" else args.lengths):
            if mode == "decode":
                batch, fused, explicit, best, nat = decode_cell(n, hd, dtype, args.rounds, args.steps)
            else:
                batch, fused, explicit, best, nat = cell(n, hd, dtype, mode == "train", causal, args.rounds,
                                                         args.steps)
            ratio = fused / explicit
            wins.append((n, ratio))
            times = {"fused": fused, "explicit": explicit, **({"native": nat} if nat is not None else {})}
            rows.append([*map(str, key), str(n), str(batch), f"{fused * 1e3:.2f}", f"{explicit * 1e3:.2f}",
                         "-" if nat is None else f"{nat * 1e3:.2f}", f"{ratio:.2f}", f"{best:.2f}",
                         "-" if nat is None else f"{fused / nat:.2f}", min(times, key=times.get)])
            print(" | ".join(rows[-1]), flush=True)
        # The crossover: the largest N below which the explicit path wins at every measured length
        # (a single noisy win at long N does not move it).
        last = 0
        for n, ratio in wins:
            if ratio <= 1.0:
                break
            last = n
        crossover[key] = last

    t_cells = table(["mode", "dtype", "mask", "head dim", "N (decode: cached keys)", "batch", "fused ms", "explicit ms",
                     "native ms", "fused / explicit", "same, best rounds", "fused / native", "fastest (median)"], rows)
    t_cross = table(["mode", "dtype", "mask", "head dim", "explicit wins up to N"],
                    [[*map(str, k), str(v)] for k, v in crossover.items()])
    print(f"\n{t_cross}")
    load_after = load_average()
    print(f"load average after: {load_after}; wall {time.time() - t0:.0f} s")
    facts.update({"load average (1, 5, 15 min) before": load_before, "after": load_after,
                  "rounds": f"{args.rounds} alternated rounds x {args.steps} calls per cell, median; one warm-up",
                  "layer": f"anyformer MultiHeadAttention, width {WIDTH}, batch = {TOKENS} // N",
                  "wall time": f"{time.time() - t0:.0f} s"})
    if not args.no_write:
        intro = (f"Produced by `benchmarks/bench_attention_kernels.py {' '.join(sys.argv[1:])}`. "
                 "`fused / explicit` above 1 means the "
                 "explicit matmul path is faster for that shape; `fused / native` above 1, anyformer's native kernel "
                 "(fp32 only; `-` where it does not take the shape). The crossover table gives the largest N "
                 "up to which the explicit path wins at every measured length.")
        write_results(RESULTS / "attention_kernels.md", "Attention kernels on CPU: SDPA, plain matmuls and the native kernel",
                      intro, facts, [("Crossover", t_cross), ("All cells", t_cells)])


if __name__ == "__main__":
    main()
