"""Training MFU on a GPU: GPT-2 124M (context 1024) and ViT-B/16 (224), bf16 autocast, against the
peers on the same card, same weights, same fused AdamW.

Contestants: for GPT-2, anyformer's GPT, Hugging Face GPT2LMHeadModel (sdpa) and the lean
nanoGPT-style reference (benchmarks/peers/nanogpt_ref.py); for ViT-B/16, anyformer's ViT, timm's
VisionTransformer and Hugging Face ViTForImageClassification (sdpa). Weights go from anyformer to
each peer (anyformer.interop, or a renaming for the reference) and the logits are compared before
anything is timed. Timed rounds alternate between contestants; each round synchronises the device
before and after, so a time is the step's wall time on the GPU.

MFU = model FLOPs per second / the device's peak. Model FLOPs per step are the same count for
every contestant (anyformer's Model.forward_flops: 6 x parameters in matmuls per token or patch,
plus attention, causal counted in full as nanoGPT and PaLM do). anyformer's ViT skips most of its
last block's work for tokens other than the class token (`Transformer(keep=1)`), about 6% of
ViT-B/16's FLOPs, so its ViT MFU is an equivalent rate on the full count. Two peaks are reported:
- spec: the bf16 dense peak of the card's data sheet, looked up by device name (H100 SXM and
  H200 989 TFLOP/s, H100 PCIe 756, A100 312), the convention behind the MFU that nanoGPT, llm.c
  and nanochat report (33-46%); the issue's goal is at least 50% on an H100;
- measured: the rate of a large bf16 matrix multiply on this card, measured in the same run
  (anyformer.train.perf), what `anyformer train` divides by in its progress line.

    python benchmarks/bench_gpu_mfu.py                        # on a CUDA machine; writes results/<processor>/gpu_mfu.md
    python benchmarks/bench_gpu_mfu.py --compile              # every contestant under torch.compile
    python benchmarks/bench_gpu_mfu.py --device cpu --quick --no-write   # the code path, tiny shapes
"""
from __future__ import annotations

import argparse
import dataclasses
import time

from bench_common import machine, setup_env, table, write_results, RESULTS

setup_env()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import anyformer as af  # noqa: E402
from anyformer.train.perf import measured_peak_flops, spec_peak_flops  # noqa: E402
from peers.nanogpt_ref import RefConfig, RefGPT, state_dict_from_anyformer  # noqa: E402

def spec_peak(device: torch.device) -> float | None:
    """The card's data-sheet dense bf16 peak (anyformer.train.perf's table), None off CUDA or unknown."""
    return spec_peak_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------------------------------------
# Contestants: (name, model, forward) holding the same weights

def gpt_contestants(quick: bool, device: torch.device, preset: str = "gpt2"):
    """GPT-2 124M, or nanoGPT's char model (`preset="shakespeare-char"`: 6 x 6 heads x 384, context
    256, dropout 0.2), against HF and the reference. The char model keeps biases and tanh GELU here,
    so that the one weight mapping serves all three; neither changes the step's cost measurably."""
    overrides = dict(width=64, depth=2, heads=2, vocab_size=256, context=64) if quick else {}
    if preset == "shakespeare-char":
        overrides.update(bias=True, activation="gelu_tanh")
    torch.manual_seed(0)
    gpt = af.GPT.preset(preset, **overrides)
    hf = gpt.to_hf()  # its dropout from the config
    hf.set_attn_implementation("sdpa")
    c = gpt.config
    ref = RefGPT(RefConfig(vocab_size=c.vocab_size, block_size=c.context, n_layer=c.depth, n_head=c.heads,
                           n_embd=c.width, dropout=c.dropout, bias=True, gelu="tanh"))
    ref.load_state_dict(state_dict_from_anyformer(gpt.state_dict(), c.depth), strict=True)
    return c.context, [("anyformer", gpt, gpt), ("HF GPT-2 (sdpa)", hf, lambda x: hf(input_ids=x, use_cache=False).logits),
                       ("nanoGPT-ref", ref, ref)]


def vit_contestants(quick: bool, device: torch.device):
    from anyformer.interop.hf import vit_to_hf
    from anyformer.interop.timm import to_timm_model
    overrides = dict(image_size=32, patch_size=8, width=64, depth=2, heads=2, mlp_hidden=128) if quick else {}
    torch.manual_seed(0)
    vit = af.ViT.preset("vit-b/16", **overrides)
    timm_vit = to_timm_model(vit)
    hf = vit_to_hf(vit)
    hf.set_attn_implementation("sdpa")
    return vit.config.image_size, [("anyformer", vit, vit), ("timm", timm_vit, timm_vit),
                                   ("HF ViT (sdpa)", hf, lambda x: hf(pixel_values=x).logits)]


# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Result:
    name: str
    times: list[float]
    peak_mem: float = 0.0

    @property
    def median(self) -> float:
        return sorted(self.times)[len(self.times) // 2]


def make_step(model, forward, x, y, device: torch.device):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = forward(x)
        loss = F.cross_entropy(logits.float().flatten(0, -2), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def plan_step(model, forward, x, y, device: torch.device) -> None:
    """One eager forward and backward, no update: anyformer's layers make their speed-plan choices,
    which a torch.compile'd graph of them then follows (the trainer's compile plan does the same)."""
    with torch.autocast(device.type, dtype=torch.bfloat16):
        logits = forward(x)
    F.cross_entropy(logits.float().flatten(0, -2), y.flatten()).backward()
    model.zero_grad(set_to_none=True)


BATCH = {"gpt2": 16, "char": 64, "vit-b16": 128}  # char: nanoGPT's shakespeare_char batch


def contestants_of(kind: str, quick: bool, device: torch.device):
    if kind == "vit-b16":
        return vit_contestants(quick, device)
    return gpt_contestants(quick, device, "gpt2" if kind == "gpt2" else "shakespeare-char")


def run(kind: str, args, device: torch.device) -> tuple[str, str, dict, dict]:
    """Training steps of every contestant of `kind` in alternated rounds: (title, table, facts,
    numbers), numbers by contestant: ms a step, items (tokens or images) a second, MFU."""
    size, contestants = contestants_of(kind, args.quick, device)
    batch = args.batch or (2 if args.quick else BATCH[kind])
    g = torch.Generator().manual_seed(1)
    ref_model = contestants[0][1]
    if kind != "vit-b16":
        vocab = ref_model.config.vocab_size
        x = torch.randint(0, vocab, (batch, size), generator=g).to(device)
        y = torch.randint(0, vocab, (batch, size), generator=g).to(device)
        items, per_item = batch * size, 3 * ref_model.forward_flops(size) / size
    else:
        x = torch.randn(batch, 3, size, size, generator=g).to(device)
        y = torch.randint(0, ref_model.config.num_classes, (batch,), generator=g).to(device)
        items, per_item = batch, 3 * ref_model.forward_flops()
    diffs, steps = [], []
    with torch.no_grad():
        ref_logits = None
        for name, model, forward in contestants:
            model.to(device).eval()
            logits = forward(x).float()
            ref_logits = logits if ref_logits is None else ref_logits
            diff = (logits - ref_logits).abs().max().item()
            diffs.append(f"{name}: {diff:.1e}")
            scale = max(1.0, ref_logits.abs().max().item())
            if diff > 1e-4 * scale:  # the same weights must give the same function before timing means anything
                raise SystemExit(f"{name}'s logits differ from anyformer's by {diff:.1e} (scale {scale:.2g})")
        del logits, ref_logits
    if device.type == "cuda":
        torch.cuda.empty_cache()
    for i, (name, model, forward) in enumerate(contestants):
        model.train()
        if args.compile:
            if i == 0:  # anyformer, as its trainer runs it: one eager step first, in which its layers ask the
                plan_step(model, forward, x, y, device)  # speed plan (SDPA's backend on CUDA), then compiled
            forward = torch.compile(forward)
        steps.append((Result(name, []), make_step(model, forward, x, y, device)))
    for result, step in steps:  # warm-up (compilation, autotuning, allocator)
        for _ in range(args.warmup):
            step()
    sync(device)
    for r in range(args.rounds):
        for j in range(len(steps)):
            result, step = steps[(r + j) % len(steps)]
            if device.type == "cuda":
                sync(device)
                torch.cuda.reset_peak_memory_stats(device)
                resident = torch.cuda.memory_allocated(device)  # every contestant's weights and state
            sync(device)
            t = time.perf_counter()
            for _ in range(args.steps):
                step()
            sync(device)
            result.times.append((time.perf_counter() - t) / args.steps)
            if device.type == "cuda":
                # what this contestant's steps added on top of what was resident (every contestant's
                # weights and optimizer state: the facts give that total)
                result.peak_mem = max(result.peak_mem, (torch.cuda.max_memory_allocated(device) - resident) / 2**30)
        print(f"  {kind} round {r + 1}/{args.rounds}: " +
              ", ".join(f"{res.name} {res.times[-1] * 1e3:.1f} ms" for res, _ in steps), flush=True)
    spec, measured = spec_peak(device), measured_peak_flops(device, "bf16")[0]
    base = steps[0][0].median
    rows, numbers = [], {}
    for res, _ in steps:
        rate = per_item * items / res.median
        numbers[res.name] = {"ms_per_step": res.median * 1e3, "items_per_s": items / res.median,
                             "mfu_spec": rate / spec if spec else None, "mfu_measured": rate / measured,
                             "anyformer_speedup": res.median / base}
        rows.append([res.name, f"{res.median * 1e3:.1f}", f"{items / res.median:,.0f}", f"{rate / 1e12:.1f}",
                     f"{100 * rate / spec:.1f}%" if spec else "-", f"{100 * rate / measured:.1f}%",
                     f"{res.peak_mem:.1f}" if res.peak_mem else "-", f"{res.median / base:.2f}x"])
    unit = "images/s" if kind == "vit-b16" else "tokens/s"
    header = ["contestant", "ms/step median", unit, "TFLOP/s", "MFU (spec peak)", "MFU (measured peak)",
              "step memory (GiB, above resident)", "time / anyformer time"]
    title = {"gpt2": f"GPT-2 124M, context {size}, batch {batch}", "vit-b16": f"ViT-B/16 at {size}, batch {batch}",
             "char": f"nanoGPT's char model (dropout 0.2), context {size}, batch {batch}"}[kind] \
        + (" (quick: tiny shapes)" if args.quick else "") + (", torch.compile" if args.compile else "")
    facts = {f"{kind} logits vs anyformer (eval, fp32)": "; ".join(diffs),
             f"{kind} model FLOPs per step": f"{per_item * items / 1e12:.3f} TFLOP",
             f"{kind} resident GPU memory (all contestants' weights and optimizer states)":
                 f"{torch.cuda.memory_allocated(device) / 2**30:.1f} GiB" if device.type == "cuda" else "-",
             "peak bf16, spec": f"{spec / 1e12:.0f} TFLOP/s" if spec else "unknown device: not reported",
             "peak bf16, measured matmul": f"{measured / 1e12:.0f} TFLOP/s"}
    return title, table(header, rows), facts, numbers


def inference(kind: str, args, device: torch.device, batch: int = 256) -> dict[str, float]:
    """Images a second of each contestant's forward (inference mode, bf16 autocast, compiled with
    --compile), in alternated rounds; `kind` is "vit-b16"."""
    size, contestants = contestants_of(kind, args.quick, device)
    x = torch.randn(2 if args.quick else batch, 3, size, size, generator=torch.Generator().manual_seed(1)).to(device)
    forwards = []

    def once(forward) -> None:
        with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16):
            forward(x)
    for i, (name, model, forward) in enumerate(contestants):
        model.to(device).eval()
        if args.compile and i == 0:
            once(forward)  # anyformer: its layers' plan choices made eagerly, then followed by the graph
        forwards.append((name, torch.compile(forward) if args.compile else forward, []))
    for _, forward, _ in forwards:
        for _ in range(args.warmup):
            once(forward)
    for r in range(args.rounds):
        for j in range(len(forwards)):
            name, forward, times = forwards[(r + j) % len(forwards)]
            sync(device)
            t = time.perf_counter()
            for _ in range(args.steps):
                once(forward)
            sync(device)
            times.append((time.perf_counter() - t) / args.steps)
    result = {name: len(x) / sorted(times)[len(times) // 2] for name, _, times in forwards}
    print(f"  {kind} inference, images/s: " + ", ".join(f"{k} {v:,.0f}" for k, v in result.items()), flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", nargs="+", default=["gpt2", "vit-b16"], choices=["gpt2", "vit-b16", "char"])
    ap.add_argument("--batch", type=int, help="default: 16 sequences (GPT-2), 128 images (ViT)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--compile", action="store_true", help="torch.compile every contestant's forward")
    ap.add_argument("--quick", action="store_true", help="tiny shapes, 2 rounds of 1 step: checks the code path")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: run on a GPU machine, or pass --device cpu --quick to check the code")
    if args.quick:
        args.rounds, args.steps, args.warmup = 2, 1, 1
    t0 = time.perf_counter()
    sections, facts = [], {**machine(), "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
    for kind in args.models:
        title, text, f, _ = run(kind, args, device)
        print(f"## {title}\n\n{text}\n" + "\n".join(f"- {k}: {v}" for k, v in f.items()), flush=True)
        sections.append((title, text))
        facts.update(f)
    facts["wall time"] = f"{time.perf_counter() - t0:.0f} s"
    if not args.no_write:
        write_results(RESULTS / "gpu_mfu.md", "Training MFU on a GPU: anyformer vs the peers",
                      "Produced by `benchmarks/bench_gpu_mfu.py`" + (" --compile" if args.compile else "") +
                      "; see its docstring for what is measured.", facts, sections,
                      folder=_gpu_folder(device))


def _gpu_folder(device: torch.device) -> str | None:
    """results/<gpu>/ for GPU figures (e.g. "nvidia-h100-80gb-hbm3"), not the host CPU's folder."""
    if device.type != "cuda":
        return None
    import re
    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(device).lower()).strip("-") or "unknown-gpu"


if __name__ == "__main__":
    main()
