"""One measurement of the GPU issue's list, written as JSON: `python benchmarks/gpu/measure.py SECTION
--json FILE [--dry-run]`. benchmarks/gpu/run.sh runs every section under its own time limit and merges
the files into summary.json.

Sections (each figure is measured here, never copied):
- gpt2, char, vit: training steps against the peers in alternated rounds, bf16 autocast, every side
  under torch.compile (bench_gpu_mfu.py); vit adds inference images/s.
- train_default: `anyformer train` (the README's main job) on the device: accuracy, training and
  wall time.
- shakespeare: nanoGPT's shakespeare-char recipe with a 60 s time budget: the validation loss.
- generate: GPT-2 124M, batch 1, a 256-token prompt and 256 new tokens, greedy, in bf16: anyformer's
  `generate` (its one-token step settled by `plan.prepare_decode`, as a server settles it) against
  Hugging Face `generate`.
- mnist_gen: the mnist-gen recipe with a 60 s time budget, judged by the train_default run.

`--dry-run` runs every section on the CPU with tiny sizes: it checks the code, not the numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from bench_common import setup_env  # noqa: E402

setup_env()  # the process settings every benchmark runs under, before torch is imported

import torch  # noqa: E402

RUNS = Path(os.environ.get("ANYFORMER_GPU_RUNS", "/tmp/anyformer-gpu-runs"))  # runs one section hands the next


def anyformer(*args: str, dry: bool) -> tuple[dict, float]:
    """`anyformer train ARGS` in a fresh process on the device: (its summary.json, wall seconds). A run
    left in --out by an earlier call (a rerun on a warm machine, which keeps /tmp) is replaced."""
    out = Path(args[args.index("--out") + 1])
    device = ["--device", "cpu"] if dry else ["--device", "cuda"]
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "anyformer", "train", *args, *device, "--no-progress", "--overwrite"],
                       cwd=ROOT, text=True, capture_output=True)
    wall = time.perf_counter() - t
    print(r.stdout[-3000:], r.stderr[-3000:], sep="\n", flush=True)
    if r.returncode:
        raise RuntimeError(f"anyformer train exited {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
    return json.loads((out / "summary.json").read_text()), wall


def peers(kind: str, dry: bool) -> dict:
    import bench_gpu_mfu as bench
    device = torch.device("cpu" if dry else "cuda")
    args = SimpleNamespace(quick=dry, batch=None, rounds=2 if dry else 4, steps=1 if dry else 5,
                           warmup=1 if dry else 3, compile=True)
    title, text, facts, numbers = bench.run(kind, args, device)
    print(f"## {title}\n\n{text}", flush=True)
    result = {"title": title, "training": numbers, "facts": facts}
    if kind == "vit-b16":
        result["inference_images_per_s"] = bench.inference(kind, args, device)
    return result


def train_default(dry: bool) -> dict:
    small = ["--max-steps", "30", "--eval-every", "30", "--limit-train", "2048", "--limit-eval", "500"] if dry else []
    summary, wall = anyformer("--out", str(RUNS / "mnist"), *small, dry=dry)
    return {"test_accuracy": summary["test_accuracy"], "train_seconds": summary["train_seconds"],
            "wall_seconds": round(wall, 1), "epochs": summary["epochs"], "amp": summary["amp"],
            "compile": summary["compile"], "plan_seconds": summary.get("plan_seconds"),
            "images_per_s": summary["images_per_s"]}


def shakespeare(dry: bool) -> dict:
    small = ["--max-steps", "6", "--eval-every", "3", "--eval-iters", "2", "--batch-size", "8",
             "--set", "depth=2", "--set", "width=64", "--set", "heads=2"] if dry else ["--time-budget", "60"]
    summary, wall = anyformer("shakespeare-char", "--out", str(RUNS / "char"), *small, dry=dry)
    return {"val_loss": summary["val_loss"], "best_val_loss": summary["best_val_loss"],
            "train_seconds": summary["train_seconds"], "wall_seconds": round(wall, 1), "steps": summary["steps"],
            "tokens_per_s": summary["tokens_per_s"], "mfu": summary["mfu"], "compile": summary.get("compile"),
            "plan_seconds": summary.get("plan_seconds")}


def mnist_gen(dry: bool) -> dict:
    judge = RUNS / "mnist"
    if not (judge / "model.safetensors").is_file():
        raise RuntimeError(f"no judge: the train_default section's run {judge} is missing")
    small = ["--max-steps", "4", "--eval-every", "4", "--limit-train", "512", "--limit-eval", "64",
             "--batch-size", "16", "--judge-samples", "20", "--set", "depth=1", "--set", "width=32",
             "--set", "heads=2", "--set", "mlp_hidden=64"] if dry else ["--time-budget", "60"]
    summary, wall = anyformer("mnist-gen", "--out", str(RUNS / "gen"), "--judge", str(judge), *small, dry=dry)
    return {"class_consistency": summary.get("class_consistency"), "frechet": summary.get("frechet"),
            "train_seconds": summary["train_seconds"], "wall_seconds": round(wall, 1), "steps": summary["steps"]}


def generate(dry: bool) -> dict:
    """Greedy continuation of one 256-token prompt by 256 tokens (tiny sizes in a dry run), bf16
    weights on both sides; each side's best of three timed runs after its warm-up."""
    import anyformer as af
    t0 = time.perf_counter()
    stage = lambda what: print(f"generate: {what} at {time.perf_counter() - t0:.1f}s", flush=True)  # noqa: E731
    device = torch.device("cpu" if dry else "cuda")
    prompt_len, new = (16, 16) if dry else (256, 256)
    shape = dict(width=64, depth=2, heads=2, vocab_size=256, context=64) if dry else {}
    torch.manual_seed(0)
    gpt = af.GPT.preset("gpt2", **shape).to(device).eval()
    hf = gpt.to_hf().to(device).eval()
    dtype = torch.float32 if dry else torch.bfloat16
    gpt, hf = gpt.to(dtype), hf.to(dtype)
    af.plan.prepare(gpt, "default")  # as `anyformer generate` and the server prepare theirs
    prompt = torch.randint(0, gpt.config.vocab_size, (1, prompt_len), generator=torch.Generator().manual_seed(1))
    prompt = prompt.to(device)

    def ours() -> torch.Tensor:
        return gpt.generate(prompt, new, temperature=0)

    def theirs() -> torch.Tensor:
        return hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new, min_new_tokens=new,
                           do_sample=False, pad_token_id=0)

    def timed(fn, repeats: int = 3) -> tuple[float, torch.Tensor]:
        best, out = float("inf"), None
        for _ in range(repeats):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            out = fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t)
        return best, out
    stage("models built")
    first_ours, _ = timed(ours, 1)  # the first request: eager, nothing compiled yet
    stage(f"first request took {first_ours:.1f}s")
    # Settled as a server settles it before it listens (measured, and compiled where faster).
    af.plan.prepare_decode(gpt, 1, prompt_len + new)
    stage(f"decode step settled (compiled: {gpt.compiled_decode(1, prompt_len + new)})")
    ours()
    ours_s, ours_out = timed(ours)
    stage(f"anyformer timed: {1e3 * ours_s / new:.2f} ms a token")
    theirs(), theirs()
    theirs_s, theirs_out = timed(theirs)
    stage(f"Hugging Face timed: {1e3 * theirs_s / new:.2f} ms a token")
    same = torch.equal(ours_out[:, prompt_len:], theirs_out[:, prompt_len:].to(ours_out.device))
    return {"prompt": prompt_len, "new_tokens": new, "dtype": str(dtype).removeprefix("torch."),
            "ms_per_token": 1e3 * ours_s / new, "hf_ms_per_token": 1e3 * theirs_s / new,
            "speedup_vs_hf": theirs_s / ours_s, "first_request_seconds": first_ours,
            "compiled_decode": gpt.compiled_decode(1, prompt_len + new), "same_tokens_as_hf": same}


SECTIONS = {"gpt2": lambda dry: peers("gpt2", dry), "char": lambda dry: peers("char", dry),
            "vit": lambda dry: peers("vit-b16", dry), "train_default": train_default, "shakespeare": shakespeare,
            "generate": generate, "mnist_gen": mnist_gen}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("section", choices=list(SECTIONS))
    ap.add_argument("--json", required=True, help="file to write the section's figures to")
    ap.add_argument("--dry-run", action="store_true", help="on the CPU with tiny sizes: checks the code path")
    args = ap.parse_args()
    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: pass --dry-run to check the code on the CPU")
    RUNS.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    figures = SECTIONS[args.section](args.dry_run)
    figures["section_seconds"] = round(time.perf_counter() - t, 1)
    Path(args.json).write_text(json.dumps(figures, indent=2, default=str) + "\n")
    print(json.dumps(figures, indent=2, default=str), flush=True)


if __name__ == "__main__":
    main()
