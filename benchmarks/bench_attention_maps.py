"""What attention maps cost: forward time and peak memory with no maps, one layer's, all layers',
and the rollout (from the full list, and streamed one layer at a time by `image_attention`).

Each (model, mode) runs in a fresh subprocess so that its peak RSS is its own: the process builds
the model, resets the kernel's RSS high-water mark (/proc/self/clear_refs, "5"), runs the mode
(one warm-up, then --repeats timed runs, median reported) and reads the peak with
`resource.getrusage`. "extra" is that peak minus the RSS just before the first forward (the
model's weights at rest), i.e. what the forward with maps needed on top of holding the model.

    python benchmarks/bench_attention_maps.py            # table + benchmarks/results/<processor>/attention_maps.md
    python benchmarks/bench_attention_maps.py --repeats 5 --models vit-mnist
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
from bench_common import processor_folder  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / processor_folder() / "attention_maps.md"  # one folder per CPU model

MODELS = {  # name -> (preset, overrides)
    "vit-mnist": ("vit-mnist", {}),
    "vit-b/16@224": ("vit-b/16", {}),
    "vit-b/16@384": ("vit-b/16", {"image_size": 384}),
}
MODES = {
    "none": "logits only (default attention path)",
    "one": "weights of the last layer only: return_attention=[-1]",
    "all": "weights of every layer: return_attention=True",
    "rollout-list": "attention_rollout(all layers' list)",
    "rollout-streamed": "image_attention(layers=[]): rollout folded in layer by layer",
}


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def worker(model_name: str, mode: str, repeats: int, threads: int) -> dict:
    import gc
    import resource

    import torch

    sys.path.insert(0, str(ROOT))
    from anyformer.models import ViT
    from anyformer.viz import attention_rollout, image_attention

    if threads > 0:
        torch.set_num_threads(threads)
    preset, overrides = MODELS[model_name]
    torch.manual_seed(0)
    vit = ViT.preset(preset, **overrides).eval()
    c = vit.config
    h, w = (c.image_size, c.image_size) if isinstance(c.image_size, int) else c.image_size
    x = torch.randn(1, c.in_chans, h, w)

    def run():
        with torch.no_grad():
            if mode == "none":
                return vit(x)
            if mode == "one":
                return vit(x, return_attention=[-1])
            if mode == "all":
                return vit(x, return_attention=True)
            if mode == "rollout-list":
                logits, attn = vit(x, return_attention=True)
                return attention_rollout(attn)
            if mode == "rollout-streamed":
                return image_attention(vit, x, layers=[])
        raise ValueError(mode)

    gc.collect()
    before = _rss_kib()
    reset = _reset_peak()
    base_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run()  # warm-up: also the first, largest allocation of this mode
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)
        del out
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"model": model_name, "mode": mode, "tokens": vit.config.grid[0] * vit.config.grid[1] + 1,
            "layers": c.depth, "heads": c.heads, "median_s": statistics.median(times),
            "times_s": times, "rss_before_mib": before / 1024, "peak_mib": peak / 1024,
            "extra_mib": (peak - (before if reset else base_peak)) / 1024, "peak_reset": reset,
            "threads": torch.get_num_threads()}


def _machine() -> dict:
    import torch
    model, cores = platform.processor() or "unknown", os.cpu_count()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            key, _, val = line.partition(":")
            if key.strip() == "Model name":
                model = val.strip()
            if key.strip() == "CPU(s)":
                cores = int(val.strip())
    except (OSError, subprocess.CalledProcessError, ValueError):
        pass
    return {"cpu": model, "cores": cores, "torch": torch.__version__, "python": platform.python_version()}


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per mode (after one warm-up)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads per run (default 1: on cores shared with other processes, two "
                         "threads stall at OpenMP barriers and single runs swing from 3 ms to 300 ms); "
                         "0 = torch's default")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker, args.repeats, args.threads)))
        return

    machine, load_start, t_start = _machine(), _load(), time.time()
    rows = []
    for model in args.models:
        for mode in args.modes:
            reps = args.repeats * 10 if model == "vit-mnist" else args.repeats
            proc = subprocess.run([sys.executable, __file__, "--worker", model, mode, "--repeats", str(reps),
                                   "--threads", str(args.threads)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"{model} {mode} failed:\n{proc.stderr[-2000:]}")
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"  {model:14s} {mode:17s} {1000 * r['median_s']:9.1f} ms  peak {r['peak_mib']:7.0f} MiB  "
                  f"extra {r['extra_mib']:6.0f} MiB", file=sys.stderr, flush=True)
    load_end = _load()

    base = {r["model"]: r for r in rows if r["mode"] == "none"}
    header = ("| model | tokens N | mode | median forward (ms) | time vs none | peak RSS (MiB) | "
              "extra over model at rest (MiB) |")
    lines = [header, "|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        ratio = f"{r['median_s'] / base[r['model']]['median_s']:.2f}x" if r["model"] in base else "-"
        lines.append(f"| {r['model']} | {r['tokens']} | {r['mode']} | {1000 * r['median_s']:.1f} | {ratio} | "
                     f"{r['peak_mib']:.0f} | {r['extra_mib']:.0f} |")
    table = "\n".join(lines)
    print(table)

    notes = [
        f"- date: {dt.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- machine: {machine['cpu']}, {machine['cores']} cores; torch {machine['torch']} (CPU), "
        f"Python {machine['python']}, {rows[0]['threads']} torch threads",
        f"- batch 1, random weights and inputs, median of {args.repeats} timed runs after one warm-up "
        f"({args.repeats * 10} for vit-mnist); each (model, mode) in a fresh subprocess",
        f"- load average (1, 5, 15 min) at start: {load_start}; at end: {load_end} "
        f"(other processes shared the CPU while these exceed 0; well above the core count, timings are "
        f"noisy to tens of percent, while the memory figures are not affected)",
        f"- wall time of the whole benchmark: {time.time() - t_start:.0f} s",
        "- peak RSS from `resource.getrusage(RUSAGE_SELF).ru_maxrss` after resetting the high-water mark "
        "(/proc/self/clear_refs) just before the first forward" if all(r["peak_reset"] for r in rows) else
        "- peak RSS from `resource.getrusage`; the high-water mark could not be reset, so 'extra' includes "
        "the model build",
    ]
    modes = "\n".join(f"- `{k}`: {v}" for k, v in MODES.items() if k in args.modes)
    expected = []
    for m in args.models:
        r = next(r for r in rows if r["model"] == m)
        full = r["layers"] * r["heads"] * r["tokens"] ** 2 * 4 / 2 ** 20
        one = r["heads"] * r["tokens"] ** 2 * 4 / 2 ** 20
        expected.append(f"- {m}: all layers' weights = {r['layers']} x {r['heads']} x {r['tokens']}^2 x 4 B = "
                        f"{full:.1f} MiB; one layer = {one:.1f} MiB")
    md = "\n".join([
        "# Attention maps: time and memory", "",
        "Produced by `benchmarks/bench_attention_maps.py`.", "",
        *notes, "", "Modes:", modes, "", table, "",
        "Sizes of the attention weights themselves (float32):", *expected, "",
        "On CPU the `auto` attention path already takes the explicit softmax for sequences of at most 128 "
        "keys (vit-mnist, N = 50), so there maps cost next to nothing; ViT-B/16 (N = 197 and 577) runs "
        "fused SDPA unless weights are asked for.", ""])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(md)
    print(f"\nwrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
