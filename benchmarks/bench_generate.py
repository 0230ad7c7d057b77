"""Generation speed on CPU, batch 1: GPT.generate with and without the key/value cache as the prefix
grows, and against Hugging Face `generate` (greedy) on the same weights.

Without the cache every new token re-runs the whole prefix, so its cost grows with the prefix; with
the cache a new token costs one position (plus attention over the cached keys), so the cache should
win by a margin that widens with the prefix. Weights are random (no pretrained GPT-2 ships in a
package we may use): speed does not depend on their values. Greedy decoding (temperature 0).

Against HF (run first): as a process's first requests (each settled by the door as `anyformer generate`
settles a request: the native step where measured faster, a compile only where the request's steps repay
it), and once the door has settled the one-token step as a server does before it listens
(`plan.prepare_decode`: measured, and compiled where faster; anyformer/plan/decode.py; the
cache-vs-no-cache rows run eager). Also timed, alternated in one process: one cached step through the model's forward under
`torch.no_grad()` and under `torch.inference_mode()` (what `generate` uses), and the step, eager
native and compiled, against its memory floor (every weight read once, and the bare matrix-vector
products on oneDNN and on MKL): a one-token step is bound by memory.

    python benchmarks/bench_generate.py                      # gpt2 shape; writes benchmarks/results/<processor>/generate.md
    python benchmarks/bench_generate.py --prefixes 32 128 --new-tokens 16 --no-write   # a quick look
    python benchmarks/bench_generate.py --set depth=6 heads=6 width=384 vocab_size=65 context=512 \
        --prefixes 256 --out generate_char.md              # the char GPT's shape (GPT-2 maths, context 512)
    python benchmarks/bench_generate.py ... --isa avx2     # AVX2 code only, as on a host without AVX-512
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench_common import add_isa_argument, processor_folder, setup_env  # noqa: E402

setup_env()  # the benchmark environment (and --isa's switches), before torch is imported

RESULTS = ROOT / "benchmarks" / "results" / processor_folder() / "generate.md"  # one folder per CPU model

from anyformer import runtime  # noqa: E402

runtime.configure()  # before torch is imported, as the CLI does

import torch  # noqa: E402

import anyformer as af  # noqa: E402
from anyformer import plan  # noqa: E402


def _sh(cmd: str) -> str:
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def machine() -> dict[str, str]:
    model = next((l.split(":", 1)[1].strip() for l in _sh("lscpu").splitlines() if l.startswith("Model name")), "?")
    return {"cpu": model, "nproc": _sh("nproc --all"), "torch": torch.__version__, "python": platform.python_version(),
            "threads": str(torch.get_num_threads()), "bind": os.environ.get("OMP_PROC_BIND", "unset")}


class Clock:
    """Wall time and this process's CPU time of a block. On a shared machine the wall time includes the
    time other jobs held the core; with one thread the CPU time is what the work itself took."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def timed(fn, repeats: int = 1) -> tuple[float, float]:
    """Best (wall, cpu) seconds over `repeats` runs."""
    wall = cpu = float("inf")
    for _ in range(repeats):
        with Clock() as c:
            fn()
        wall, cpu = min(wall, c.wall), min(cpu, c.cpu)
    return wall, cpu


def bench_cache(gpt, prefixes: list[int], new_tokens: int, repeats: int) -> list[dict]:
    rows = []
    g = torch.Generator().manual_seed(0)
    for p in prefixes:
        prompt = torch.randint(0, gpt.config.vocab_size, (1, p), generator=g)
        gpt.generate(prompt, 2, temperature=0, use_cache=True)  # warm-up at this length
        t_cache = timed(lambda: gpt.generate(prompt, new_tokens, temperature=0, use_cache=True), repeats)
        gpt.generate(prompt, 2, temperature=0, use_cache=False)
        t_full = timed(lambda: gpt.generate(prompt, new_tokens, temperature=0, use_cache=False))
        row = {"prefix": p, "cached": new_tokens / t_cache[0], "uncached": new_tokens / t_full[0],
               "cached_cpu": new_tokens / t_cache[1], "uncached_cpu": new_tokens / t_full[1]}
        row["ratio"] = row["cached"] / row["uncached"]
        row["ratio_cpu"] = row["cached_cpu"] / row["uncached_cpu"]
        rows.append(row)
        print(f"prefix {p:4d}: cached {row['cached']:7.1f} tok/s ({row['cached_cpu']:7.1f} per CPU-s)   "
              f"uncached {row['uncached']:7.1f} tok/s ({row['uncached_cpu']:7.1f} per CPU-s)   "
              f"cache wins x{row['ratio']:.1f} (x{row['ratio_cpu']:.1f} in CPU time)", flush=True)
    return rows


def alternate(ways: dict, rounds: int, per_round: int) -> dict[str, float]:
    """Median over `rounds` of each way's fastest of `per_round` calls, the ways taking turns and
    the first of them rotating from round to round, so a burst of outside load falls on each alike.
    `ways` maps a name to (reset, fn): reset() runs untimed before each call of fn()."""
    times: dict[str, list[float]] = {k: [] for k in ways}
    names = list(ways)
    for r in range(rounds + 1):  # round 0 warms up
        for name in names[r % len(names):] + names[:r % len(names)]:
            reset, fn = ways[name]
            best = float("inf")
            for _ in range(per_round):
                reset()
                t = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - t)
            if r:
                times[name].append(best)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def one_step_setup(gpt, prefix: int, mode=torch.inference_mode, step=None):
    """(rewind, step), as `alternate` takes them: a cache filled with `prefix` random tokens; step() feeds it one more token
    through the model's forward under `mode` (generate's: inference mode; or through `step`, a decode
    step as generation calls it), and rewind() sets the
    cache's position back to `prefix` so that every timed step does the same work. The cache is made
    under `mode` too: a cache made in inference mode cannot be written outside it."""
    tok = torch.zeros(1, 1, dtype=torch.long)
    with mode():
        cache = gpt.new_cache(1, prefix + 1)
        gpt(torch.randint(0, gpt.config.vocab_size, (1, prefix), generator=torch.Generator().manual_seed(2)),
            cache=cache)

    def forward():
        with mode():
            return gpt(tok, cache=cache, last_only=True)[:, -1] if step is None else step(gpt, tok, cache)

    def rewind() -> None:
        with mode():
            cache.position.fill_(prefix)
    return rewind, forward


def bench_step(gpt, prefix: int, rounds: int = 20, per_round: int = 5) -> dict:
    """One cached step (the token after `prefix` tokens) through the forward under `no_grad` and
    under `inference_mode` (generate's), alternated; per round the fastest of `per_round` calls.
    Both restart from the same cache length, so they do identical work."""
    row = alternate({"no_grad": one_step_setup(gpt, prefix, torch.no_grad),
                     "inference_mode": one_step_setup(gpt, prefix, torch.inference_mode)}, rounds, per_round)
    row.update(prefix=prefix, rounds=rounds, saved=1 - row["inference_mode"] / row["no_grad"])
    print(f"one cached step after {prefix} tokens, median of {rounds} alternated rounds: forward under no_grad "
          f"{row['no_grad']:.2f} ms, under inference_mode {row['inference_mode']:.2f} ms "
          f"(saves {100 * row['saved']:.1f}%)", flush=True)
    return row


READ_ALL = "read every weight once (sum)"
MV_ONEDNN = "matrix-vector products, oneDNN (anyformer's linears)"
MV_MKL = "matrix-vector products, torch F.linear (MKL)"
NATIVE_STEP = "anyformer's cached step (native blocks)"


def settled_step_setup(gpt, prefix: int, total: int):
    """(rewind, step) for the decode step that `generate` runs for `total`-token requests (compiled or
    native), if the door settled one in this process (the HF comparison runs first); else None."""
    from anyformer.models.generation import cache_length, compiled_steps
    size = cache_length(gpt, total)
    compiled = compiled_steps(gpt).get((1, size))  # what generate runs: the same compiled graph or native step
    if compiled is None:
        return None
    tok = torch.zeros(1, 1, dtype=torch.long)
    with torch.inference_mode():
        cache = gpt.new_cache(1, size)
        gpt(torch.randint(0, gpt.config.vocab_size, (1, prefix), generator=torch.Generator().manual_seed(2)),
            cache=cache)

    def step():
        with torch.inference_mode():
            return compiled.run(gpt, tok, cache)

    def rewind() -> None:
        with torch.inference_mode():
            cache.position.fill_(prefix)
    return rewind, step


def bench_floor(gpt, prefix: int, total: int, rounds: int = 15, per_round: int = 3) -> dict:
    """What one cached step could cost at best: it multiplies a vector by every weight matrix once,
    so it must read every weight from memory once. Alternated with the real step, each round:
    reading all weight matrices (a sum over each: the memory read rate), the bare matrix-vector
    products on oneDNN (what anyformer's linears run) and through F.linear (torch's default BLAS,
    MKL; HF's GPT-2 multiplies the same products through addmm on transposed weights), and the
    step itself: the model's eager forward, its blocks in one native call (plan/decode_native.py), and
    the compiled static step where generate runs it.
    Biases, norms and attention over the cache are left out of the bare rows, so the step's excess
    over them is everything else it does."""
    from anyformer.limits import copy_bandwidth
    from anyformer.plan.kernels import onednn_mm as _mm
    bandwidth = copy_bandwidth() / 1e9  # before the rounds: the memory rate the bytes a token are read against
    mats = [m.weight for m in gpt.modules() if isinstance(m, torch.nn.Linear)] + [gpt.lm_head.weight]
    xs = {k: torch.randn(1, k) for k in {w.shape[1] for w in mats}}
    gbytes = sum(w.numel() * w.element_size() for w in mats) / 1e9

    def nothing() -> None:
        pass
    ways = {READ_ALL: (nothing, lambda: [w.sum() for w in mats]),
            MV_ONEDNN: (nothing, lambda: [_mm(xs[w.shape[1]], w) for w in mats]),
            MV_MKL: (nothing, lambda: [torch.nn.functional.linear(xs[w.shape[1]], w) for w in mats]),
            "anyformer's cached step (eager forward)": one_step_setup(gpt, prefix)}
    from anyformer.plan.decode_native import NativeDecodeStep, unsupported
    if unsupported(gpt) is None:
        ways[NATIVE_STEP] = one_step_setup(gpt, prefix, step=NativeDecodeStep(gpt))
    settled = settled_step_setup(gpt, prefix, total)
    if settled is not None and _settled_kind(gpt, total) == "compiled":
        ways["anyformer's cached step (compiled static graph)"] = settled
    with torch.inference_mode():
        rows = alternate(ways, rounds, per_round)
    print(f"weights read per step: {gbytes * 1e3:.0f} MB; median of {rounds} alternated rounds:", flush=True)
    for k, ms in rows.items():
        print(f"  {k:45s} {ms:6.2f} ms  {gbytes / ms * 1e3:5.1f} GB/s", flush=True)
    return {"gbytes": gbytes, "rounds": rounds, "prefix": prefix, "ms": rows, "bandwidth": bandwidth}


def _pairs(gpt, hf, prompt, new_tokens: int, kw: dict, repeats: int, door=None) -> dict:
    """`repeats` back-to-back runs of each, alternating who goes first: best wall and CPU time of
    each, the per-pair ratios, and both outputs. `door()`, where given, runs before each of
    anyformer's requests, inside its time (as `anyformer generate` settles a request's step)."""
    t_hf = t_ours = (float("inf"),) * 2
    pairs, out = [], {}
    for r in range(repeats):
        run = {}
        for who in (("hf", "ours") if r % 2 == 0 else ("ours", "hf")):
            with Clock() as c:
                if who == "ours" and door is not None:
                    door()
                out[who] = hf.generate(prompt, **kw) if who == "hf" else gpt.generate(prompt, new_tokens, temperature=0)
            run[who] = (c.wall, c.cpu)
        t_hf = (min(t_hf[0], run["hf"][0]), min(t_hf[1], run["hf"][1]))
        t_ours = (min(t_ours[0], run["ours"][0]), min(t_ours[1], run["ours"][1]))
        pairs.append(run["hf"][0] / run["ours"][0])
    row = {"ours": new_tokens / t_ours[0], "hf": new_tokens / t_hf[0], "ours_cpu": new_tokens / t_ours[1],
           "hf_cpu": new_tokens / t_hf[1], "pair_ratios": pairs, "ratio_median": statistics.median(pairs),
           "outputs": out}
    row["ratio"], row["ratio_cpu"] = row["ours"] / row["hf"], row["ours_cpu"] / row["hf_cpu"]
    return row


def _show(name: str, prefix: int, new_tokens: int, repeats: int, row: dict, attn: str) -> None:
    print(f"{name}: {prefix} prefix + {new_tokens} new, greedy, best of {repeats}: anyformer {row['ours']:.1f} tok/s "
          f"({row['ours_cpu']:.1f} per CPU-s), Hugging Face {row['hf']:.1f} tok/s ({row['hf_cpu']:.1f} per CPU-s; "
          f"attn={attn}), anyformer/HF x{row['ratio']:.2f} (x{row['ratio_cpu']:.2f} in CPU time); per back-to-back "
          "pair x" + ", x".join(f"{r:.2f}" for r in row["pair_ratios"]) + f" (median x{row['ratio_median']:.2f})",
          flush=True)


def bench_hf(gpt, prefix: int, new_tokens: int, repeats: int = 2) -> dict | None:
    """anyformer's `generate` against HF's, twice: as a process's first requests (each settled by the
    door as `anyformer generate` settles one, `plan.prepare_decode` with the request's steps, inside its
    time: the native step where measured faster, compiled only where the steps repay a compile), and
    once `plan.prepare_decode` has settled the step as a server does before it listens (measured,
    and compiled where faster)."""
    try:
        import transformers
    except ImportError:
        print("transformers is not importable: Hugging Face comparison skipped")
        return None
    from anyformer.models.generation import cache_length
    from anyformer.plan.decode import plan_fields
    hf = gpt.to_hf()  # anyformer.interop: the same weights in a GPT2LMHeadModel
    prompt = torch.randint(0, gpt.config.vocab_size, (1, prefix), generator=torch.Generator().manual_seed(1))
    # No end-of-text token (random weights may emit it): both make exactly new_tokens, and HF needs
    # no min-length processor to do so.
    kw = dict(max_new_tokens=new_tokens, do_sample=False, num_beams=1, eos_token_id=None, pad_token_id=None,
              attention_mask=torch.ones_like(prompt))
    total = prefix + new_tokens
    attn = getattr(hf.config, "_attn_implementation", "?")
    with torch.no_grad():
        hf.generate(prompt, **{**kw, "max_new_tokens": 4})  # warm-up
        gpt.generate(prompt, 4, temperature=0)
        compiled_before = gpt.compiled_decode(1, total)
        first = _pairs(gpt, hf, prompt, new_tokens, kw, repeats,
                       door=lambda: plan.prepare_decode(gpt, 1, total, steps=new_tokens - 1))
        first_kind = _settled_kind(gpt, total)
        _show("first requests", prefix, new_tokens, repeats, first, attn)
        compiled_in_first = gpt.compiled_decode(1, total)
        t0 = time.perf_counter()
        plan.prepare_decode(gpt, 1, total)
        settle_s = time.perf_counter() - t0
        print(f"decode step settled by the door in {settle_s:.1f} s: {_settled_kind(gpt, total)} "
              f"(first requests: {first_kind})", flush=True)
        gpt.generate(prompt, 4, temperature=0)  # warm-up, as before the first requests
        steady = _pairs(gpt, hf, prompt, new_tokens, kw, repeats)
        _show("settled", prefix, new_tokens, repeats, steady, attn)
    hf_out, ours_out = steady["outputs"]["hf"], steady["outputs"]["ours"]
    if hf_out.shape[1] != total:
        raise RuntimeError(f"HF generated {hf_out.shape[1] - prefix} tokens, not {new_tokens}")
    agree = int((ours_out[0, prefix:] == hf_out[0, prefix:]).cumprod(0).sum())
    entry = plan.planner().entry("compile", {**plan_fields(gpt, 1, cache_length(gpt, total)), "pass": "decode"})
    return {"transformers": transformers.__version__, "prefix": prefix, "new": new_tokens, "attn": attn,
            "agree": agree, "first": first, "steady": steady, "settle_s": settle_s,
            "compiled_before": compiled_before, "compiled_in_first": compiled_in_first,
            "compiled": gpt.compiled_decode(1, total), "plan_entry": entry, "first_kind": first_kind,
            "settled_kind": _settled_kind(gpt, total)}


def _settled_kind(gpt, total: int) -> str:
    """The step generate runs for `total`-token requests: "compiled", "native" or "eager" (none settled)."""
    from anyformer.models.generation import cache_length, compiled_steps
    step = compiled_steps(gpt).get((1, cache_length(gpt, total)))
    return "eager" if step is None else step.kind


def write(path: Path, args, info, load_before, load_after, rows, step_row, floor_row, hf_row,
          seconds: float) -> None:
    c = args.shape
    lines = [
        "# Generation speed (CPU, batch 1, greedy)", "",
        f"- date: {dt.datetime.now().isoformat(timespec='seconds')}",
        f"- machine: {info['cpu']}, nproc {info['nproc']}, torch {info['torch']} ({info['threads']} threads, "
        f"OMP_PROC_BIND={info['bind']}), Python {info['python']}",
        f"- model: {args.model} shape with random weights ({c}), fp32",
        f"- load (`uptime`) before: `{load_before}`", f"- load after: `{load_after}`",
        "- the CPU was shared with other jobs while this ran (see the load): absolute figures are lower and "
        "noisier than on an idle machine; the ratios are what this measures.",
        f"- command: `{'OMP_PROC_BIND=' + info['bind'] + ' ' if info['bind'] == 'false' else ''}python "
        f"benchmarks/bench_generate.py {' '.join(sys.argv[1:])}` ({seconds:.0f} s)", "",
        f"## Key/value cache vs recomputing the prefix ({args.new_tokens} new tokens each; cached: best of "
        f"{args.repeats} runs, uncached: one run; both eager, any compiled step set aside: what the cache itself is worth)", "",
        "Tokens per second of wall time, and (in brackets) per second of this process's CPU time, which on "
        "this shared machine is the steadier measure of the work (with one thread it approximates the rate on an idle "
        "core); the cache's win is given in both.", "",
        "| prefix | with cache (tok/s) | without cache (tok/s) | cache wins (wall) | cache wins (CPU time) |",
        "|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['prefix']} | {r['cached']:.1f} ({r['cached_cpu']:.1f}) | {r['uncached']:.2f} "
              f"({r['uncached_cpu']:.2f}) | x{r['ratio']:.1f} | x{r['ratio_cpu']:.1f} |" for r in rows]
    lines += ["", "## The generation step", "",
              f"`GPT.generate` computes every token with the model's one forward and the key/value cache, under "
              f"`torch.inference_mode()`, which skips autograd's per-operation bookkeeping that `no_grad` still does. "
              f"One cached step after {step_row['prefix']} tokens, median of {step_row['rounds']} alternated rounds "
              f"(fastest of 5 calls each):", "",
              "| forward under no_grad (ms) | under inference_mode (ms) | saved |", "|---:|---:|---:|",
              f"| {step_row['no_grad']:.2f} | {step_row['inference_mode']:.2f} | {100 * step_row['saved']:.1f}% |"]
    lines += ["", "## How close the step is to the memory floor", "",
              f"A cached step multiplies one vector by every weight matrix, so it reads all "
              f"{floor_row['gbytes'] * 1e3:.0f} MB of them once. Median of {floor_row['rounds']} alternated rounds "
              f"(fastest of 3 each); GB/s is that weight volume over the time (for the step, an equivalent rate: "
              f"it also reads biases, norms and the {floor_row['prefix']}-position key/value cache). The share is of "
              f"the host's memory bandwidth, {floor_row['bandwidth']:.1f} GB/s (anyformer.limits.copy_bandwidth: a "
              f"256 MiB copy, its bytes read and written, measured before the rounds; `anyformer doctor --limits`).",
              "", "| | ms | GB/s | of the bandwidth |", "|---|---:|---:|---:|"]
    lines += [f"| {k} | {ms:.2f} | {floor_row['gbytes'] / ms * 1e3:.1f} | "
              f"{floor_row['gbytes'] / ms * 1e3 / floor_row['bandwidth'] * 100:.0f}% |"
              for k, ms in floor_row["ms"].items()]
    if hf_row:
        first, steady = hf_row["first"], hf_row["steady"]
        entry = hf_row["plan_entry"] or {}
        times = entry.get("times", {})
        lines += ["", f"## anyformer vs Hugging Face transformers {hf_row['transformers']} `generate`", "",
                  f"{hf_row['prefix']}-token prefix + {hf_row['new']} new tokens, batch 1, greedy, both with their "
                  f"caches, best of {args.hf_repeats} runs taken alternately; the same weights (converted by "
                  f"`GPT.to_hf`); HF attention implementation `{hf_row['attn']}`. anyformer runs as it ships, "
                  "its speed plan choosing (no flags). It is measured twice: as a process's first requests, "
                  "each settled by the door as `anyformer generate` settles one (`plan.prepare_decode` with the "
                  "request's steps, inside the request's time: the native step where measured faster, a compile "
                  "only where the steps repay it), and once the door has settled the one-token step as a server "
                  "does before it listens (`plan.prepare_decode`, anyformer/plan/decode.py: measured, and "
                  f"compiled where faster; {hf_row['settle_s']:.0f} s, untimed).", "",
                  "| | first requests: tokens/s (wall) | per CPU-s | settled: tokens/s (wall) | per CPU-s |",
                  "|---|---:|---:|---:|---:|",
                  f"| anyformer `GPT.generate` | {first['ours']:.1f} | {first['ours_cpu']:.1f} | {steady['ours']:.1f} | "
                  f"{steady['ours_cpu']:.1f} |",
                  f"| Hugging Face `generate` | {first['hf']:.1f} | {first['hf_cpu']:.1f} | {steady['hf']:.1f} | "
                  f"{steady['hf_cpu']:.1f} |",
                  f"| ratio anyformer / HF | x{first['ratio']:.2f} | x{first['ratio_cpu']:.2f} | x{steady['ratio']:.2f} | "
                  f"x{steady['ratio_cpu']:.2f} |", "",
                  f"- the step generate ran: {hf_row['first_kind']} in the first requests, "
                  f"{hf_row['settled_kind']} once settled (generation itself never compiles)"
                  + (f"; the plan's record: eager {times['eager'] * 1e3:.2f} ms, compiled "
                     f"{times['compiled'] * 1e3:.2f} ms a step, compile {entry.get('compile_s', 0):.1f} s, "
                     f"chose {entry.get('choice')}" if times.get("eager") and times.get("compiled") else ""),
                  "- ratio (HF wall time / anyformer wall time) within each back-to-back pair of runs, in order: "
                  "first requests " + ", ".join(f"x{r:.2f}" for r in first["pair_ratios"])
                  + f" (median x{first['ratio_median']:.2f}); settled "
                  + ", ".join(f"x{r:.2f}" for r in steady["pair_ratios"]) + f" (median x{steady['ratio_median']:.2f})",
                  "- the best-of ratio compares each library's least disturbed run; the pairs show how far load "
                  "from other jobs moves it. A native step runs the blocks in one call of anyformer's own kernel "
                  "(plan/decode_native.py: each weight row read once, no per-operation dispatch); an eager one runs "
                  "the linear layers on oneDNN where its plan measured that faster (HF's through torch's default "
                  "BLAS, MKL); a compiled one does every one-row product as one fused pass over the weight.",
                  f"- greedy tokens identical for the first {hf_row['agree']} of {hf_row['new']} (settled; "
                  "random weights give near-ties, where float rounding may pick differently; token-for-token "
                  "parity is the job of the interop and decode tests)."]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2", help="a GPT preset (default gpt2: 124M parameters)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=INT", help="preset overrides, e.g. depth=6")
    ap.add_argument("--prefixes", type=int, nargs="+", default=[32, 128, 256, 512])
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of the cached path (best kept)")
    ap.add_argument("--hf-prefix", type=int, default=256)
    ap.add_argument("--hf-new", type=int, default=256)
    ap.add_argument("--hf-repeats", type=int, default=2, help="alternating timed runs of each (best kept)")
    add_isa_argument(ap)
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--out", default=RESULTS.name, metavar="NAME",
                    help=f"the results file, in {RESULTS.parent.relative_to(ROOT)} (default {RESULTS.name})")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    overrides = {k: int(v) for k, v in (s.split("=", 1) for s in args.set)}
    gpt = af.GPT.preset(args.model, **overrides).eval()
    # Prepared by the plan as `anyformer generate` prepares it: its choices made before the first request.
    plan.prepare(gpt, "default")
    c = gpt.config
    args.shape = f"{c.depth} layers, width {c.width}, {c.heads} heads, vocab {c.vocab_size}, context {c.context}, " \
                 f"{gpt.num_params() / 1e6:.0f}M parameters"
    info = machine()
    load_before = _sh("uptime")
    print(f"{info['cpu']} | nproc {info['nproc']} | torch {info['torch']} | {info['threads']} threads")
    print(f"model {args.model}: {args.shape}\nload: {load_before}")
    t0 = time.perf_counter()
    # HF first: its "first requests" are this process's first generations of that size.
    hf_row = None if args.no_hf else bench_hf(gpt, args.hf_prefix, args.hf_new, args.hf_repeats)
    from anyformer.models.generation import compiled_steps
    compiled = dict(compiled_steps(gpt))  # the cache's own worth: the same eager step at every prefix
    compiled_steps(gpt).clear()
    rows = bench_cache(gpt, args.prefixes, args.new_tokens, args.repeats)
    compiled_steps(gpt).update(compiled)
    step_row = bench_step(gpt, args.hf_prefix)
    floor_row = bench_floor(gpt, args.hf_prefix, args.hf_prefix + args.hf_new)
    load_after = _sh("uptime")
    print(f"load: {load_after}")
    if not args.no_write:
        write(RESULTS.with_name(args.out), args, info, load_before, load_after, rows, step_row, floor_row, hf_row,
              time.perf_counter() - t0)


if __name__ == "__main__":
    main()
