"""anyformer's ViT against timm and Hugging Face ViT on the CPU, same shapes, same weights.

Two models:
- `mnist`: Turner's MNIST ViT (28x28x1, patch 4, width 128, depth 8, 8 heads, MLP 128, LayerNorm
  eps 1e-3, no final norm, a GELU pre-logits layer of 128 on the class token), batch 128. timm and
  HF are built with the same blocks; their final norm is replaced by an identity and their head
  by the same two-layer head, so all three compute the same function (checked before timing).
- `ti16`: ViT-Ti/16 at 224x224, 1000 classes, batch 32 (timm's vit_tiny_patch16_224 layout).

Weights go from anyformer to timm and HF through anyformer.interop. Every contestant trains with
the same torch AdamW (foreach), fp32, cross-entropy, no dropout; inference is a forward pass in
`torch.inference_mode()` in eval mode. HF ViT runs with both its attention implementations
(`sdpa`, its default, and `eager`, explicit matmuls).

anyformer's model is benchmarked as its trainer runs it, with the speed plan's choices for this
machine (anyformer/plan): its training step under torch.compile where the plan measured a compiled
step faster, and its inference passes likewise where compiled passes measured faster
(anyformer.plan.compile_for_inference; the rows `anyformer eager` force compile=eager: what compiling
adds), and its linear layers on oneDNN where that measured faster (per shape, and in training also for
the whole step together: anyformer.plan.linears), for training and, by default, for inference
too (anyformer/nn/linear.py); and its attention on anyformer's own kernel where that measured faster
than SDPA (anyformer/plan/native.py). Its logits therefore match timm's and HF's to about 1e-6 of their
scale (summation order; tests/interop allow 1e-5 of max(1, max|ref|)),
not bitwise. The extra row `anyformer, MKL inference` runs the same model with
the plan forced to `linear=stock`, which keeps gradient-free passes on F.linear
(bitwise nn.Linear), to show what oneDNN adds there.

    python benchmarks/bench_vit_cpu.py                    # both models (~5 min), writes results/<processor>/vit_cpu.md
    python benchmarks/bench_vit_cpu.py --models mnist --quick --no-write
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from bench_common import (Contestant, add_isa_argument, alternate,
                          attention_matmuls, linear_matmuls, load_average, machine,
                          matmul_flops, measure_memory_here, setup_env,
                          speed_table, table, wait_for_quiet, write_results, RESULTS, host_peak, peak_facts,
                          infer_step)
import bench_common  # noqa: E402  (its train_step, wrapped below with this benchmark's settings)

setup_env()

import torch  # noqa: E402
from torch import nn  # noqa: E402

import anyformer as af  # noqa: E402
from anyformer.interop._torchvision_compat import ensure_torchvision_importable  # noqa: E402

ensure_torchvision_importable()

MODELS = {
    "mnist": dict(preset="vit-mnist", batch=128, title="Turner's MNIST ViT, batch 128"),
    "ti16": dict(preset="vit-ti/16", batch=32, title="ViT-Ti/16 at 224, batch 32"),
}
PEERS = ("timm", "HF ViT sdpa", "HF ViT eager")
NOTES = """\
- Where anyformer's lead comes from: attention on anyformer's native kernel (q, k and v read in
  place from the packed projection, the heads written out concatenated, each head's scores kept in
  the caches; anyformer/plan/native/kernels.cpp) where the plan measured it faster than SDPA, which
  at head dim 16 over 50 tokens was about a third of the step; and its linear layers on oneDNN
  instead of MKL where the plan measured that faster (the `matmul torch` and `matmul oneDNN` rows
  show by how much on this CPU: 2x on the AMD EPYC of 2026-11-21, 1.1-1.2x on the one of
  2026-11-24). LayerNorm, GELU and AdamW are the kernels the peers call. The K=128 products of seed
  000's MNIST ViT gain least from oneDNN at 2 threads (in training the weight gradient needs a
  transposed copy of an activation that eats most of its gain), so the plan usually keeps F.linear
  for them; ViT-Ti (width 192, MLP 768) gains more.
- Turner's MNIST ViT reads the class token, so anyformer's last block computes its query,
  attention output, MLP and norm for that token alone (`Transformer(keep=1)`, benchmarks/README.md):
  same logits, about half a block less work; the peers compute the whole block. GFLOP/s counts the
  full model's FLOPs for every contestant, an equivalent rate for anyformer.
- Attention at head dim 16 over 50 tokens: the plan times SDPA, plain matmuls and the native
  kernel on the packed q/k/v projection, as a layer hands it over. Plain matmuls ran at about
  SDPA's speed there (1.5x faster on contiguous operands, but the copies to make them eat that);
  the native kernel, which needs no copies, ran the layer's forward and backward 1.4-2.0x faster
  than SDPA in one-off timings on this host. The last block queries its class token only: the native
  kernel does not take that case, and the plan chooses between SDPA and plain matmuls for it.
- Inference passes run under torch.compile where the plan measured that faster
  (`compile_for_inference`; the header line says what it chose); the `anyformer eager` row is the
  same model forced eager. In these rounds the two were within their spread of each other.
- Inference: by default anyformer's forward passes without autograd run on oneDNN too. Its
  logits differ from the peers' (MKL) by summation order only, about 1e-6 of their scale (the
  `weights` line above; the interop parity tests allow 1e-5 of max(1, max|ref|)). The row
  `anyformer, MKL inference` is the same model with the plan forced to `linear=stock`, which keeps
  those passes on `F.linear`, bitwise nn.Linear: it shows what oneDNN inference is worth.
- bf16 autocast: the bf16 table above says whether it pays on this CPU. Where bf16 is native (a
  2-core AMD EPYC: bf16 matmuls at ~500-750 GFLOP/s) it trained 1.6-1.7x faster than fp32; where it
  is emulated through fp32 (an Intel Xeon without avx512_bf16) 2-6x slower. `amp=auto` times both.
- The peak-memory table is RSS in a fresh process: anyformer's rest figure is lower because that
  process imports neither timm nor transformers."""

BF16 = "anyformer bf16 autocast"
MKL_INFER = "anyformer, MKL inference"
EAGER = "anyformer eager"
PLAN_NOTES: list[str] = []  # what the compile plan chose for each model, for the results' header
INFER_NOTES: list[str] = []  # the same for inference passes


def shapes(model: str, train: bool) -> list:
    """Every matrix product of one step: patch projection, blocks, attention, head."""
    c = af.ViT.preset(MODELS[model]["preset"]).config
    batch = MODELS[model]["batch"]
    gh, gw = c.grid
    n = gh * gw + 1
    ph, pw = c.patch_size if isinstance(c.patch_size, tuple) else (c.patch_size, c.patch_size)
    m = linear_matmuls(batch * gh * gw, c.in_chans * ph * pw, c.width, train=train, grad_input=False)
    for fan_in, fan_out in ((c.width, 3 * c.width), (c.width, c.width), (c.width, c.mlp_hidden),
                            (c.mlp_hidden, c.width)):
        m += linear_matmuls(batch * n, fan_in, fan_out, train=train, count=c.depth)
    m += attention_matmuls(batch, c.heads, n, n, c.width // c.heads, train=train, count=c.depth)
    if c.head_hidden:
        m += linear_matmuls(batch, c.width, c.head_hidden, train=train)
    m += linear_matmuls(batch, c.head_hidden or c.width, c.num_classes, train=train)
    return m


# ---------------------------------------------------------------------------------------------
# Contestants with shared weights


def anyformer_model(model: str) -> af.ViT:
    torch.manual_seed(0)
    return af.ViT.preset(MODELS[model]["preset"])  # plain: prepared for each row's step (bench_common.prepared)


def _same_head(vit: af.ViT) -> nn.Module:
    """A copy of anyformer's classifier (pre-logits layer and all), for peers that lack one.

    Its linears are plain nn.Linear, not anyformer's oneDNN Linear (a subclass): the peer's
    grafted head must run on the peer's own (MKL) kernels."""
    head = vit.head
    layers = [head.pre_logits[0], head.pre_logits[1]] if head.pre_logits is not None else []
    copy = nn.Sequential(*[nn.Linear(m.in_features, m.out_features) if isinstance(m, nn.Linear) else m
                           for m in [*layers, head.fc]])
    copy.load_state_dict(nn.Sequential(*layers, head.fc).state_dict())
    return copy


def _standard(vit: af.ViT) -> af.ViT:
    """The same ViT without Turner's extras (pre-logits, no final norm), which interop exports;
    the extras are then grafted onto the peer by hand."""
    from anyformer.models.base import config_from_dict
    from anyformer.models.vit import ViTConfig
    c = config_from_dict(ViTConfig, {**vit.config.__dict__, "head_hidden": None, "final_norm": True,
                                     "num_classes": vit.config.head_hidden or vit.config.num_classes})
    std = af.ViT(c)
    weights = {k: v for k, v in vit.state_dict().items() if not k.startswith("head.")}
    std.load_state_dict(weights, strict=False)  # backbone and embeddings; the head and norm are replaced
    return std


def timm_model(vit: af.ViT) -> nn.Module:
    from anyformer.interop.timm import to_timm_model
    if not vit.config.head_hidden and vit.config.final_norm:
        return to_timm_model(vit).train()
    model = to_timm_model(_standard(vit))
    model.norm, model.head = nn.Identity(), _same_head(vit)
    return model.train()


def hf_model(vit: af.ViT, attn: str) -> tuple[nn.Module, callable]:
    from anyformer.interop.hf import vit_to_hf
    standard = not vit.config.head_hidden and vit.config.final_norm
    model = vit_to_hf(vit if standard else _standard(vit))
    model.set_attn_implementation(attn)
    if not standard:
        model.vit.layernorm, model.classifier = nn.Identity(), _same_head(vit)
    return model.train(), (lambda x: model(pixel_values=x).logits)


def build(model: str, name: str, vit: af.ViT | None = None):
    """(module, forward) of contestant `name`, holding anyformer's weights."""
    vit = vit or anyformer_model(model)
    if name in ("anyformer", BF16):
        return vit, vit
    if name == "timm":
        m = timm_model(vit)
        return m, m
    if name.startswith("HF ViT"):
        return hf_model(vit, name.split()[-1])
    raise ValueError(name)


def data(model: str):
    c = af.ViT.preset(MODELS[model]["preset"]).config
    g = torch.Generator().manual_seed(1)
    b = MODELS[model]["batch"]
    h, w = c.image_size if isinstance(c.image_size, tuple) else (c.image_size, c.image_size)
    return torch.randn(b, c.in_chans, h, w, generator=g), torch.randint(0, c.num_classes, (b,), generator=g)


def train_step(module, forward, x, y, bf16: bool = False):
    return bench_common.train_step(module, forward, x, y, lr=1e-4, weight_decay=0.05, bf16=bf16)


def check_same_outputs(model: str, x) -> str:
    vit = anyformer_model(model).eval()
    with torch.no_grad():
        ref = vit(x)
        diffs = []
        for name in PEERS:
            m, fwd = build(model, name, vit)
            m.eval()
            diffs.append(f"{name}: max |logit diff| {(fwd(x) - ref).abs().max().item():.1e}")
    return ", ".join(diffs)


def memory_child(model: str, name: str) -> None:
    x, y = data(model)

    def make():
        m, fwd = build(model, name)
        bf16 = name == BF16
        return infer_step(m, fwd, x, bf16), train_step(m, fwd, x, y, bf16)
    print("MEMORY:" + json.dumps(measure_memory_here(make)))


# ---------------------------------------------------------------------------------------------


def run_model(model: str, args) -> tuple[list[tuple[str, str]], list[tuple[str, str, bool]], str]:
    spec = MODELS[model]
    x, y = data(model)
    same = check_same_outputs(model, x)
    print(f"\n=== {spec['title']}\nsame weights: {same}", flush=True)
    train_flops, infer_flops = matmul_flops(shapes(model, True)), matmul_flops(shapes(model, False))
    b = spec["batch"]
    names = ["anyformer", *PEERS]

    def baselines(train: bool) -> list[Contestant]:
        return bench_common.matmul_baselines(shapes(model, train), b, train_flops if train else infer_flops)

    train = []
    for name in names:
        m, fwd = build(model, name)
        if name == "anyformer":  # the plan's choice, as `anyformer train` makes it
            fwd, note = bench_common.planned_forward(f"vit-{model}", m, x, y)
            PLAN_NOTES.append(note)
        train.append(Contestant(name, train_step(m, fwd, x, y), b, train_flops))
    m, fwd = build(model, "anyformer")
    bench_common.planned_linears(f"vit-{model}", m, x, y)  # as the trainer runs an eager step
    train.append(Contestant(EAGER, train_step(m, fwd, x, y), b, train_flops, "ANYFORMER_PLAN=compile=eager"))
    bf16_train = []  # emulated bf16 (no native bf16, or an AVX2 host stood in for by --isa avx2) is not timed
    if args.with_bf16:
        m, fwd = build(model, BF16)
        bench_common.prepared(m, x, y, bf16=True)
        bf16_train = [Contestant(BF16, train_step(m, fwd, x, y, bf16=True), b, train_flops, "not the same maths")]
    base = baselines(True)
    if not args.with_bf16:
        base = base[:2]  # the bare bf16 products too
    rounds, steps = args.rounds[model], args.steps[model]
    print(f"training: {rounds} rounds x {steps} steps", flush=True)
    alternate(train + [*bf16_train, *base], rounds=rounds, steps=steps)

    infer = []
    for name in names:
        m, fwd = build(model, name)
        if name == "anyformer":  # the plan's choice for inference passes
            fwd, note = bench_common.planned_inference(f"vit-{model}", m, x)
            INFER_NOTES.append(note)
        infer.append(Contestant(name, infer_step(m, fwd, x), b, infer_flops))
    m, fwd = build(model, "anyformer")
    infer.append(Contestant(EAGER, infer_step(bench_common.prepared(m, x), fwd, x), b, infer_flops,
                            "ANYFORMER_PLAN=compile=eager"))
    m, fwd = build(model, "anyformer")
    infer.append(Contestant(MKL_INFER, infer_step(bench_common.prepared(m, x, forced="linear=stock"), fwd, x), b,
                            infer_flops, "ANYFORMER_PLAN=compile=eager,linear=stock"))
    bf16_infer = []
    if args.with_bf16:
        m, fwd = build(model, BF16)
        bench_common.prepared(m, x, bf16=True)
        bf16_infer = [Contestant(BF16, infer_step(m, fwd, x, bf16=True), b, infer_flops, "not the same maths")]
    ibase = baselines(False)
    if not args.with_bf16:
        ibase = ibase[:2]
    print(f"inference: {rounds + 1} rounds x {steps} batches", flush=True)
    alternate(infer + [*bf16_infer, *ibase], rounds=rounds + 1, steps=steps)

    title = spec["title"]
    sections = [
        (f"{title}: training (fp32, AdamW)", speed_table(train, "anyformer", base[:2], "images", host_peak("fp32"))),
        (f"{title}: bf16 autocast training (anyformer only; not the same maths as fp32; CPU MFU of the bf16 rate)",
         speed_table([train[0], *bf16_train], "anyformer", [base[2]], "images", host_peak("bf16")) if args.with_bf16
         else bench_common.BF16_NOT_TIMED),
        (f"{title}: inference (fp32, inference_mode)",
         speed_table(infer + bf16_infer, "anyformer", ibase, "images", host_peak("fp32"))),
    ]
    for heading, text in sections:
        print(f"\n## {heading}\n\n{text}", flush=True)

    by = {c.name: c for c in train}
    ours = by["anyformer"]
    fastest = min((by[p] for p in PEERS), key=lambda c: c.median)
    ifastest = min((c for c in infer if c.name in PEERS), key=lambda c: c.median)
    rate = ours.flops / ours.median
    mkl_rate, dnn_rate = (c.flops / c.median for c in base[:2])
    targets = [(f"{model} train >= 1.0x the fastest peer", f"{fastest.name}: {fastest.median / ours.median:.2f}x",
                fastest.median >= ours.median)]
    if model == "mnist":
        targets.append(("mnist train >= 1.2x timm", f"{by['timm'].median / ours.median:.2f}x",
                        by["timm"].median >= 1.2 * ours.median))
    else:
        targets.append((f"{model} train >= 90% of the plain-matmul rate (torch matmul, MKL)",
                        f"{rate / mkl_rate * 100:.0f}%", rate >= 0.9 * mkl_rate))
        targets.append(("(same, against the oneDNN matmul rate anyformer's linears use)",
                        f"{rate / dnn_rate * 100:.0f}%", rate >= 0.9 * dnn_rate))
    # Inference targets are judged on the default `anyformer` row (the plan's choices), not the extras.
    itimm, iours = (next(c for c in infer if c.name == n) for n in ("timm", "anyformer"))
    targets.append((f"{model} inference >= 1.1x timm", f"{itimm.median / iours.median:.2f}x",
                    itimm.median >= 1.1 * iours.median))
    targets.append((f"{model} inference >= 1.0x the fastest peer", f"{ifastest.name}: "
                    f"{ifastest.median / iours.median:.2f}x", ifastest.median >= iours.median))

    if not args.no_memory:
        t_mem = bench_common.memory_section(__file__, [(name, [model, name]) for name in
                                                       [*names, *([BF16] if args.with_bf16 else [])]])
        sections.append((f"{title}: peak memory (RSS high-water, fresh process per contestant, 3 steps each)", t_mem))
        print(f"\n{t_mem}", flush=True)
    return sections, targets, same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--rounds", type=int, help="alternated rounds (default: mnist 4, ti16 3)")
    ap.add_argument("--steps", type=int, help="training steps per contestant per round (default: mnist 2, ti16 1)")
    ap.add_argument("--quick", action="store_true", help="one round of one step, no memory: a smoke test")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-write", action="store_true", help="print only; leave results/<processor>/vit_cpu.md alone")
    ap.add_argument("--no-wait", action="store_true", help="do not wait for the load to drop below 2.5")
    bench_common.add_bf16_argument(ap, "a step took 5 s under --isa avx2 on a Zen 4, against 0.37 s in fp32")
    ap.add_argument("--memory-child", nargs=2, help=argparse.SUPPRESS)
    add_isa_argument(ap)
    args = ap.parse_args()
    if args.memory_child:
        return memory_child(*args.memory_child)
    args.with_bf16 = bench_common.with_bf16(args.bf16)
    args.rounds = {m: args.rounds or (1 if args.quick else {"mnist": 4, "ti16": 3}[m]) for m in MODELS}
    args.steps = {m: args.steps or (1 if args.quick else {"mnist": 2, "ti16": 1}[m]) for m in MODELS}
    args.no_memory = args.no_memory or args.quick

    load_before = load_average() if args.no_wait else wait_for_quiet()
    facts = {**machine(), **peak_facts()}  # the peaks measured before any round
    print(json.dumps(facts, indent=1))
    print(f"load average before: {load_before}", flush=True)
    t0 = time.time()
    sections, targets, weights = [], [], []
    for model in args.models:
        s, t, same = run_model(model, args)
        sections += s
        targets += t
        weights.append(f"{model}: {same}")
    t_targets = table(["target", "measured", "met"], [[a, b, "yes" if ok else "**no**"] for a, b, ok in targets])
    sections.append(("Targets", t_targets))
    sections.append(("Notes", NOTES))
    print(f"\n## Targets\n\n{t_targets}")
    load_after = load_average()
    print(f"load average after: {load_after}; wall {time.time() - t0:.0f} s")
    facts.update({"load average (1, 5, 15 min) before": load_before, "after": load_after,
                  "rounds": ", ".join(f"{m}: training {args.rounds[m]} x {args.steps[m]} steps, inference "
                                      f"{args.rounds[m] + 1} x {args.steps[m]} batches" for m in args.models)
                            + "; one warm-up step each; median over rounds",
                  "weights": "; ".join(weights),
                  "anyformer's compile plan (training)": "; ".join(PLAN_NOTES),
                  "anyformer's compile plan (inference)": "; ".join(INFER_NOTES),
                  "FLOPs counted": "matrix products only (patch projection, blocks, attention, head)",
                  "wall time": f"{time.time() - t0:.0f} s"})
    if not args.no_write:
        intro = (f"Produced by `benchmarks/bench_vit_cpu.py` ({' '.join(sys.argv[1:]) or 'defaults'}); see "
                 "benchmarks/README.md for what is measured. fp32, torch AdamW (foreach) for every contestant, "
                 "same weights. anyformer runs as its trainer would, with the speed plan's choices for this "
                 "machine: its training step under torch.compile where the plan measured that faster (the "
                 "`anyformer eager` rows force compile=eager), and its inference passes likewise where the plan "
                 "measured compiled passes faster; its linear layers on oneDNN where that measured faster, "
                 "per shape and, in training, for the whole step (anyformer.plan.linears; anyformer/nn/linear.py); "
                 "its attention on anyformer's native kernel where that measured faster than SDPA "
                 "(anyformer/plan/native.py, compiled on this machine); the `MKL inference` row is the same eager model with the plan forced "
                 "to linear=stock, its gradient-free passes on F.linear (bitwise nn.Linear). "
                 "`time / anyformer time` is the contestant's median over anyformer's: above 1, anyformer is "
                 "faster. `spread` is (max - min) / median over the rounds. `of matmul torch` / `of matmul "
                 "oneDNN`: achieved GFLOP/s over the rate of the same matrix products run bare in the same "
                 "rounds, through torch.matmul (MKL, what nn.Linear uses) or with the 2-D products on oneDNN.")
        write_results(RESULTS / "vit_cpu.md", "ViT on CPU: anyformer vs timm and Hugging Face", intro, facts, sections)


if __name__ == "__main__":
    main()
