"""nanoGPT's own code on its CPU recipe against anyformer on the same recipe: time and loss.

nanoGPT's README gives a recipe for a CPU (Tiny Shakespeare characters, 4 layers x 4 heads x 128, context 64,
batch 12, 2,000 iterations, learning rate 1e-3 decayed to 1e-4 after 100 warm-up steps, AdamW with beta2 0.99,
weight decay 0.1, clipping at 1.0, no dropout, an evaluation of 20 batches every 250 iterations, no compile):

    python train.py config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20 --log_interval=1 \
        --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 \
        --dropout=0.0

This script runs that (saving a checkpoint at every evaluation, so that the last model is scored), with nanoGPT's own train.py from a checkout you give it, and `anyformer train
shakespeare-char` set to the same recipe (below, ANYFORMER_ARGS), one after the other in alternated rounds
(ABBA: nanoGPT first in odd rounds, anyformer first in even ones), each a process of its own, on the same text.
Each contestant's time is its process's wall time, start to exit (imports, data, planning, evaluations and
checkpoints included), since that is what a user waits for. Its loss is scored twice: as the tool itself
printed it at the last step (20 random batches, so noisy), and by this script on the same footing for both: the
mean next-character cross-entropy over every whole 64-character window of the validation text (the last 10% of
the characters, nanoGPT's split and anyformer's), from each run's saved weights.

How near the processor's limit each is, and how far a faster step could take the ratio: each contestant's
training loop (its steps alone: anyformer's `train_seconds`, nanoGPT's printed iteration times less the ones
that evaluated) as ms a step, GFLOP/s and a CPU MFU against the host's fp32 product rate (anyformer.limits,
measured here before the rounds); and the floor, the step's matrix products alone (the same shapes, bare, on
MKL and on oneDNN, timed after each round): no same-maths step goes below it, so nanoGPT's time over a run whose
every step took the floor bounds the ratio any fp32 code could reach on this host.

nanoGPT's data step (data/shakespeare_char/prepare.py) downloads the text when input.txt is missing; here the
checkout is copied into --work and the text put there first, so nothing is downloaded. nanoGPT's checkpoint is
read with torch.load(weights_only=True): tensors and plain values only, no code.

    git clone https://github.com/karpathy/nanoGPT /tmp/nanoGPT
    python benchmarks/bench_nanogpt_recipe.py --nanogpt /tmp/nanoGPT                # 2 rounds; results/<cpu>/
    python benchmarks/bench_nanogpt_recipe.py --nanogpt /tmp/nanoGPT --isa avx2     # as on an AVX2-only host
    python benchmarks/bench_nanogpt_recipe.py --nanogpt /tmp/nanoGPT --max-iters 50 --rounds 1 --no-write
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_common import (Contestant, add_isa_argument, alternate, attention_matmuls, host_peak,  # noqa: E402
                          linear_matmuls, load_average, machine, matmul_baseline, matmul_flops, on_all_cores,
                          setup_env, table, write_results)

setup_env()  # before torch: the same allocator, thread and instruction-set settings for both processes

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

CONTEXT = 64
VOCAB, WIDTH, DEPTH, HEADS, BATCH = 65, 128, 4, 4, 12  # the recipe's model and batch (Tiny Shakespeare's 65 characters)
EVAL_INTERVAL = 250  # the config's; nanoGPT's iterations at multiples of it also evaluated
FLOOR_REPEATS = 30   # the floor's step, timed this many times per library after each round (alternated)
INTRO = ("nanoGPT's own train.py on its README's CPU recipe (Tiny Shakespeare characters, 4 layers x 4 heads x 128, "
         "context 64, batch 12, 2,000 iterations, no compile) and `anyformer train shakespeare-char` set to the same "
         "recipe, each a process of its own, in alternated rounds. Time: each process's wall time, start to exit. "
         "Loss: as each printed it at the last step (20 batches), and scored here from the saved weights on every "
         "whole 64-character window of the validation text (the last 10%). Each training loop's ms a step, GFLOP/s "
         "and CPU MFU, and the floor: the step's matrix products alone.")


def nanogpt_args(max_iters: int) -> list[str]:
    """nanoGPT README's CPU recipe, its numbers as they are, and one switch: a checkpoint at every evaluation
    (`always_save_checkpoint`; the config keeps only improvements), so that the model scored is the last one,
    as anyformer's is. Fewer iterations (a dry run) evaluate at the last one too."""
    extra = [f"--eval_interval={max_iters}"] if max_iters < EVAL_INTERVAL else []
    return ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
            "--log_interval=1", f"--block_size={CONTEXT}", "--batch_size=12", "--n_layer=4", "--n_head=4",
            "--n_embd=128", f"--max_iters={max_iters}", f"--lr_decay_iters={max_iters}", "--dropout=0.0",
            "--always_save_checkpoint=True", *extra]


def anyformer_args(max_iters: int) -> list[str]:
    """The same recipe in anyformer's words. config/train_shakespeare_char.py sets the rest (learning rate 1e-3,
    min_lr 1e-4, warm-up 100, beta2 0.99, evaluations every 250); train.py's defaults give weight decay 0.1,
    clipping 1.0 and no biases, as the shakespeare-char preset and recipe do."""
    return ["shakespeare-char", "--set", f"context={CONTEXT}", "--set", "width=128", "--set", "depth=4",
            "--set", "heads=4", "--set", "dropout=0", "--set", "attn_dropout=0", "--seq-len", str(CONTEXT),
            "--batch-size", "12", "--max-steps", str(max_iters), "--lr", "1e-3", "--warmup-steps", "100",
            "--weight-decay", "0.1", "--grad-clip", "1.0", "--eval-every", str(min(EVAL_INTERVAL, max_iters)),
            "--eval-iters", "20", "--no-progress", "--no-plots"]


def prepare_nanogpt(checkout: Path, text: Path, work: Path) -> Path:
    """A copy of the checkout with the text where its prepare.py looks first, and prepare.py run there."""
    if not (checkout / "train.py").is_file() or not (checkout / "model.py").is_file():
        raise SystemExit(f"--nanogpt {checkout}: expected a nanoGPT checkout (train.py, model.py), found neither")
    tree = work / "nanoGPT"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(checkout, tree, ignore=shutil.ignore_patterns(".git", "out*"))
    data = tree / "data" / "shakespeare_char"
    shutil.copyfile(text, data / "input.txt")
    subprocess.run([sys.executable, "prepare.py"], cwd=data, check=True, capture_output=True)
    return tree


def timed(cmd: list[str], cwd: Path, log: Path) -> float:
    """Run `cmd` to its end, its output in `log`, on every core this script was given; the wall seconds it took."""
    start = time.perf_counter()
    with log.open("w") as f:
        rc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, preexec_fn=on_all_cores).returncode
    seconds = time.perf_counter() - start
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... exited with {rc}; its output: {log}")
    return seconds


def printed_loss(log: Path, pattern: str) -> float:
    """The last validation loss a tool printed."""
    found = re.findall(pattern, log.read_text())
    if not found:
        raise SystemExit(f"{log}: no validation loss printed (expected a line matching {pattern!r})")
    return float(found[-1])


def precision(log: Path) -> str:
    """The precision an anyformer run says it trains in, on its first line ("... | fp32 | 2,000 steps ..."): the
    speed plan takes bf16 autocast where the processor has bf16 and measures it faster, and nanoGPT on a CPU
    trains in fp32, so a reader must see which maths each row is."""
    lines = log.read_text().splitlines()
    parts = lines[0].split(" | ") if lines else []
    return parts[2] if len(parts) > 3 else "(not printed)"


def step_shapes() -> list:
    """Every matrix product of one training step of the recipe's model (forward and backward, the LM head too)."""
    tokens, m = BATCH * CONTEXT, []
    for fan_in, fan_out in ((WIDTH, 3 * WIDTH), (WIDTH, WIDTH), (WIDTH, 4 * WIDTH), (4 * WIDTH, WIDTH)):
        m += linear_matmuls(tokens, fan_in, fan_out, train=True, count=DEPTH)
    m += attention_matmuls(BATCH, HEADS, CONTEXT, CONTEXT, WIDTH // HEADS, train=True, count=DEPTH)
    return m + linear_matmuls(tokens, WIDTH, VOCAB, train=True)


def nanogpt_step_seconds(log: Path, max_iters: int) -> float:
    """nanoGPT's mean training iteration, from its printed times ("iter N: loss X, time T ms"), the iterations
    that also evaluated (N a multiple of the evaluation interval: its timer spans the evaluation) left out."""
    interval = min(EVAL_INTERVAL, max_iters)
    times = [float(t) for n, t in re.findall(r"iter (\d+): loss [0-9.]+, time ([0-9.]+)ms", log.read_text())
             if int(n) % interval]
    if not times:
        raise SystemExit(f"{log}: no iteration times printed (expected lines like 'iter 1: loss ..., time ...ms')")
    return statistics.fmean(times) / 1e3


def anyformer_step_seconds(run_dir: Path) -> float:
    """anyformer's mean training step: its summary's seconds in steps (evaluations and planning left out) over
    its steps."""
    summary = json.loads((run_dir / "summary.json").read_text())
    return summary["train_seconds"] / summary["steps"]


def windows(ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Every whole (CONTEXT + 1)-token window, not overlapping: inputs and next-token targets."""
    n = (len(ids) - 1) // CONTEXT
    t = torch.tensor(ids[:n * CONTEXT + 1])
    return t[:-1].view(n, CONTEXT), t[1:].view(n, CONTEXT)


@torch.no_grad()
def cross_entropy(logits_of, x: torch.Tensor, y: torch.Tensor, batch: int = 64) -> float:
    total = 0.0
    for i in range(0, len(x), batch):
        logits = logits_of(x[i:i + batch]).float()
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[i:i + batch].reshape(-1),
                                 reduction="sum").item()
    return total / y.numel()


def nanogpt_val_loss(tree: Path, out_dir: Path, text: str) -> float:
    """nanoGPT's saved model, by its own model.py, on every validation window (its vocabulary: the sorted
    characters of the whole text, as prepare.py makes it)."""
    sys.path.insert(0, str(tree))
    try:
        from model import GPT, GPTConfig  # nanoGPT's own module, from the copy
    finally:
        sys.path.remove(str(tree))
    ckpt = torch.load(out_dir / "ckpt.pt", map_location="cpu", weights_only=True)
    model = GPT(GPTConfig(**ckpt["model_args"]))
    model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()})
    model.eval()
    stoi = {c: i for i, c in enumerate(sorted(set(text)))}
    x, y = windows([stoi[c] for c in text[int(len(text) * 0.9):]])
    # nanoGPT's forward returns the last position's logits unless given targets; with targets, every position's.
    return cross_entropy(lambda xb: model(xb, xb)[0], x, y)


def anyformer_val_loss(run_dir: Path, text: str) -> float:
    import anyformer as af
    run = af.open_run(run_dir)
    x, y = windows(run.text_tokenizer().encode(text[int(len(text) * 0.9):]))
    return cross_entropy(run.model, x, y)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nanogpt", type=Path, required=True, help="a checkout of github.com/karpathy/nanoGPT")
    ap.add_argument("--text", type=Path, default=ROOT.parent / "shared" / "data" / "tinyshakespeare" / "input.txt",
                    help="Tiny Shakespeare's input.txt (default: ../shared/data/tinyshakespeare/input.txt)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_nanogpt_recipe"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-iters", type=int, default=2000, help="the recipe's 2,000; fewer for a dry run")
    ap.add_argument("--no-write", action="store_true", help="print, write no results file")
    add_isa_argument(ap)
    args = ap.parse_args()
    if args.rounds < 1:
        raise SystemExit(f"--rounds {args.rounds}: expected 1 or more")
    if not args.text.is_file():
        raise SystemExit(f"--text {args.text}: expected Tiny Shakespeare's input.txt, found no file")
    text = args.text.read_text()
    args.work.mkdir(parents=True, exist_ok=True)
    tree = prepare_nanogpt(args.nanogpt.resolve(), args.text, args.work)

    peak, flops = host_peak("fp32"), matmul_flops(step_shapes())
    floors = [Contestant("MKL", matmul_baseline(step_shapes()), BATCH * CONTEXT, flops),
              Contestant("oneDNN", matmul_baseline(step_shapes(), backend="onednn"), BATCH * CONTEXT, flops)]
    rows, ratios, precisions, walls, loops = [], [], [], {"nanoGPT": [], "anyformer": []}, []
    load_before = load_average()
    for r in range(args.rounds):
        order = ["nanoGPT", "anyformer"] if r % 2 == 0 else ["anyformer", "nanoGPT"]
        seconds, own, ours, step_s = {}, {}, {}, {}
        for who in order:
            log = args.work / f"{who}-r{r}.log"
            if who == "nanoGPT":
                out = args.work / f"nanogpt-out-r{r}"
                shutil.rmtree(out, ignore_errors=True)
                seconds[who] = timed([sys.executable, "train.py", *nanogpt_args(args.max_iters), f"--out_dir={out}"],
                                     tree, log)
                own[who] = printed_loss(log, r"step \d+: train loss [0-9.]+, val loss ([0-9.]+)")
                ours[who] = nanogpt_val_loss(tree, out, text)
                step_s[who] = nanogpt_step_seconds(log, args.max_iters)
            else:
                out = args.work / f"anyformer-r{r}"
                shutil.rmtree(out, ignore_errors=True)
                seconds[who] = timed([sys.executable, "-m", "anyformer", "train", *anyformer_args(args.max_iters),
                                      "--data", str(args.text), "--out", str(out)], ROOT, log)
                own[who] = printed_loss(log, r"val loss ([0-9.]+)")
                precisions.append(precision(log))
                ours[who] = anyformer_val_loss(out, text)
                step_s[who] = anyformer_step_seconds(out)
                loops.append(step_s[who] * args.max_iters)
            walls[who].append(seconds[who])
            print(f"round {r}: {who} {seconds[who]:.1f} s, val loss printed {own[who]:.4f}, "
                  f"every window {ours[who]:.4f}, {step_s[who] * 1e3:.1f} ms a step", flush=True)
        ratios.append(seconds["nanoGPT"] / seconds["anyformer"])
        rows += [[f"{r}", who, f"{seconds[who]:.1f}", f"{step_s[who] * 1e3:.1f}", f"{flops / step_s[who] / 1e9:.1f}",
                  f"{flops / step_s[who] / peak * 100:.0f}%", f"{own[who]:.4f}", f"{ours[who]:.4f}",
                  f"x{ratios[-1]:.2f}" if who == "anyformer" else "-"] for who in order]
        alternate(floors, rounds=FLOOR_REPEATS, steps=1, verbose=False)  # each adds to its .times
    load_after = load_average()

    median = statistics.median(ratios)
    summary = (f"nanoGPT's wall time over anyformer's: median **x{median:.2f}** over {len(ratios)} rounds "
               f"({', '.join(f'x{q:.2f}' for q in ratios)}); the goal (issue 58) is x1.5 or more on every host")
    print(summary)
    result = table(["round", "contestant", "wall s", "loop ms a step", "GFLOP/s", "CPU MFU",
                    "val loss (printed, 20 batches)", f"val loss (every {CONTEXT}-char window)",
                    "nanoGPT's time / anyformer's"], rows)
    print(result)
    limit = floor_text(floors, flops, peak, walls, loops, args.max_iters)
    print(limit)
    if args.no_write:
        return
    facts = {**machine(), "load before / after": f"{load_before} / {load_after}",
             "nanoGPT": f"`{args.nanogpt}` at {_git_head(args.nanogpt)}",
             "nanoGPT command": "`python train.py " + " ".join(nanogpt_args(args.max_iters)) + " --out_dir=...`",
             "anyformer command": "`python -m anyformer train " + " ".join(anyformer_args(args.max_iters))
                                  + f" --data {args.text.name} --out ...`",
             "anyformer's precision (its speed plan's choice here; nanoGPT's is fp32 on a CPU)":
                 ", ".join(sorted(set(precisions))),
             "this script": "`python benchmarks/bench_nanogpt_recipe.py " + " ".join(sys.argv[1:]) + "`"}
    write_results(ROOT / "benchmarks" / "results" / "nanogpt_recipe.md",
                  "nanoGPT's own code on its CPU recipe against anyformer on the same recipe",
                  INTRO, facts, [("Result", summary + "\n\n" + result), ("The floor", limit)])


def floor_text(floors: list[Contestant], flops: float, peak: float, walls: dict[str, list[float]],
               loops: list[float], steps: int) -> str:
    """The step's products alone by library, and the ratio a run of anyformer's whose every step took the
    lower of them (the rest of its run, start-up and evaluations, as it was) would have had."""
    medians = {c.name: c.median for c in floors}
    rows = [[name, f"{s * 1e3:.1f}", f"{flops / s / 1e9:.1f}", f"{flops / s / peak * 100:.0f}%"]
            for name, s in medians.items()]
    floor = min(medians.values())
    rest = statistics.median(w - loop for w, loop in zip(walls["anyformer"], loops))
    bound = statistics.median(walls["nanoGPT"]) / (rest + steps * floor)
    return (f"The recipe's step does {flops / 1e9:.2f} GFLOP of matrix products (forward and backward, causal "
            f"attention counted in full); the host's fp32 product rate here is {peak / 1e9:.1f} GFLOP/s. The same "
            f"products alone, bare (median of {len(floors[0].times)} timings after the rounds):\n\n"
            + table(["library", "ms a step", "GFLOP/s", "of the product rate"], rows)
            + f"\n\nWere every one of anyformer's {steps:,} steps as short as the faster of these "
              f"({floor * 1e3:.1f} ms) and the rest of its run (start-up, evaluations, checkpoints: {rest:.1f} s, "
              f"the median) as it was, nanoGPT's median time would be **x{bound:.2f}** of it: no fp32 step with "
              f"these products beats that.")


def _git_head(checkout: Path) -> str:
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "(not a git checkout)"


if __name__ == "__main__":
    main()
