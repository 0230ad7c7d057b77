"""Where a training step's time goes: `anyformer train ARGS` run in this process, as the command runs it (its speed
plan, its batches), with steps [skip, skip + steps) timed bare and the next `steps` under torch.profiler. Each
operator's self time (its own, not its children's) is put in one group by its name, and the groups are given per
step and as shares of the profiled time, with the operators that took most below; what no operator took is
Python, the data and the profiler's own bookkeeping between them. The profiler inflates memory-bound operators'
self times too (the char GPT's GELU read 3.5x its time in the same step run bare: docs/results.md): read their
shares as upper bounds, and time an operator in the bare step before building on its share.

    python benchmarks/profile_step.py --isa avx2 --tag nanogpt-recipe -- shakespeare-char --set context=64 \\
        --set width=128 --set depth=4 --set heads=4 --seq-len 64 --batch-size 12 --max-steps 300 --no-progress
    python benchmarks/profile_step.py --isa avx2 --tag mnist-recipe --skip 10 --steps 20 -- mnist --max-steps 50

ARGS are `anyformer train`'s (after `--`); their --max-steps must leave room for skip + 2 x steps. --isa avx2 runs
every library's AVX2 code (bench_common.ISA_ENV), so an AVX2 host's profile can be taken on an AVX-512 one. The
table goes to results/<processor>[-as-<isa>]/profile_<tag>.md (--no-write: printed only).
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import bench_common

if TYPE_CHECKING:  # torch is imported after bench_common.setup_env(), which must come first
    from torch.autograd.profiler_util import FunctionEventAvg

# The groups, in the order a name is tried: the first whose test it passes takes it.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the loss", ("nll_loss", "cross_entropy", "log_softmax")),
    ("attention", ("attention", "softmax")),
    ("optimizer and gradient clip", ("adam", "_foreach_", "optimizer.", "vector_norm", "clip")),
    ("matrix products", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::mv", "aten::addmv",
                         "onednn", "mkldnn_linear", "mkldnn_matmul")),
    ("convolutions", ("conv",)),
    ("GELU and other activations", ("gelu", "silu", "relu", "tanh", "sigmoid")),
    ("norms", ("layer_norm", "batch_norm", "rms_norm", "group_norm")),
    ("copies, fills and joins", ("copy_", "fill_", "zero_", "aten::cat", "aten::stack", "clone", "contiguous",
                                 "_to_copy", "index", "embedding", "aten::empty")),
    ("element-wise and reductions", ("aten::add", "aten::sub", "aten::mul", "aten::div", "aten::sum",
                                     "aten::mean", "aten::where", "aten::lerp", "aten::sqrt", "aten::neg")),
)
OTHER = "autograd's and the dispatcher's own work (views, bookkeeping)"


def group_of(name: str) -> str:
    """The group an operator's time goes to, by its profiler name (`aten::mm`, `_EagerAttentionBackward`, ...): a
    key with `::` names an operator, matched whole or with a suffix after `_` or `.` (`aten::add` takes `aten::add_`
    and not `aten::addmm`); any other key is matched anywhere in the name, case aside."""
    low = name.lower()
    for group, keys in GROUPS:
        for key in keys:
            if "::" in key:
                if low == key or low.startswith(key + "_") or low.startswith(key + "."):
                    return group
            elif key in low:
                return group
    return OTHER


def grouped(events: list[FunctionEventAvg]) -> dict[str, float]:
    """Self CPU time in seconds by group (every event's own time once, so the groups add up to the profiled ops)."""
    out: dict[str, float] = {}
    for e in events:
        g = group_of(e.key)
        out[g] = out.get(g, 0.0) + e.self_cpu_time_total / 1e6
    return out


def report(bare_s: float, profiled_s: float, steps: int, events: list[FunctionEventAvg], top: int = 15) -> str:
    """The markdown: the groups per step and as shares of the profiled steps' wall time, then the top operators."""
    groups = grouped(events)
    in_ops = sum(groups.values())
    rows = [[g, f"{s / steps * 1e3:.2f}", f"{s / profiled_s * 100:.1f}%"]
            for g, s in sorted(groups.items(), key=lambda kv: -kv[1])]
    rows.append(["outside any operator (Python, the data, and most of the profiler's own cost)",
                 f"{max(profiled_s - in_ops, 0) / steps * 1e3:.2f}", f"{max(profiled_s - in_ops, 0) / profiled_s * 100:.1f}%"])
    lines = [f"A step took {bare_s / steps * 1e3:.2f} ms bare and {profiled_s / steps * 1e3:.2f} ms under the profiler "
             f"(the mean over {steps} steps each; the difference is the profiler's own cost, most of it outside the "
             "operators' self times).", "",
             bench_common.table(["group", "ms a step (profiled)", "of the profiled time"], rows), "",
             "The operators that took most (self time, over the profiled steps):", ""]
    ops = sorted(events, key=lambda e: -e.self_cpu_time_total)[:top]
    lines.append(bench_common.table(
        ["operator", "group", "calls a step", "us a call", "ms a step"],
        [[f"`{e.key[:60]}`", group_of(e.key), f"{e.count / steps:g}", f"{e.self_cpu_time_total / max(e.count, 1):.0f}",
          f"{e.self_cpu_time_total / steps / 1e3:.2f}"] for e in ops]))
    return "\n".join(lines)


def run(train_args: list[str], skip: int, steps: int) -> tuple[float, float, list[FunctionEventAvg]]:
    """Run `anyformer train train_args` here; returns the bare and the profiled wall time of `steps` steps each,
    and the profiled steps' operators."""
    from torch.profiler import ProfilerActivity, profile

    from anyformer.cli import main
    from anyformer.train import Trainer

    step_of = Trainer.train_step
    done, marks, prof = [0], {}, profile(activities=[ProfilerActivity.CPU])

    def train_step(self) -> None:  # the trainer's own step, counted; the clock and the profiler around a window
        i = done[0]
        if i in (skip, skip + steps, skip + 2 * steps):
            marks[i] = time.perf_counter()
        if i == skip + steps:
            prof.__enter__()
        step_of(self)
        done[0] += 1
        if done[0] == skip + 2 * steps:
            prof.__exit__(None, None, None)
            marks[done[0]] = time.perf_counter()

    Trainer.train_step = train_step
    try:
        main(["train", *train_args])
    except SystemExit as e:
        if e.code not in (0, None):
            raise
    finally:
        Trainer.train_step = step_of
        if skip + steps < done[0] < skip + 2 * steps:  # the run ended inside the window: the profiler stops too
            prof.__exit__(None, None, None)
    if done[0] < skip + 2 * steps:
        raise SystemExit(f"the run took {done[0]} steps, fewer than --skip + 2 x --steps = {skip + 2 * steps}: "
                         "raise its --max-steps")
    bare = marks[skip + steps] - marks[skip]
    profiled = marks[skip + 2 * steps] - marks[skip + steps]
    return bare, profiled, list(prof.key_averages())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip", type=int, default=50, help="steps run first, neither timed nor profiled (default 50)")
    ap.add_argument("--steps", type=int, default=50, help="steps timed bare, then as many profiled (default 50)")
    ap.add_argument("--tag", default="step", help="the results file's name: profile_<tag>.md")
    ap.add_argument("--no-write", action="store_true", help="print, write no results file")
    bench_common.add_isa_argument(ap)
    ap.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then `anyformer train`'s arguments")
    args = ap.parse_args()
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    if not train_args:
        ap.error("expected `-- TRAIN_ARGS` (anyformer train's arguments), got none")
    if args.skip < 0 or args.steps < 1:
        ap.error(f"--skip >= 0 and --steps >= 1, got {args.skip} and {args.steps}")
    facts = {**bench_common.machine(), "cpu (lscpu)": bench_common.cpu_words()}
    bare, profiled, events = run(train_args, args.skip, args.steps)
    body = report(bare, profiled, args.steps, events)
    print(body)
    if args.no_write:
        return
    command = "python benchmarks/profile_step.py " + shlex.join(sys.argv[1:])
    facts = {**facts, "command": f"`{command}`", "load average after": bench_common.load_average()}
    bench_common.write_results(Path(__file__).resolve().parent / "results" / f"profile_{args.tag}.md",
                               f"Where a training step's time goes: {args.tag}",
                               "`benchmarks/profile_step.py`: `anyformer train` in one process, its operators' self "
                               "time under torch.profiler, grouped by kind.", facts, [("The step", body)])


if __name__ == "__main__":
    bench_common.setup_env()  # before torch: the benchmark environment, and --isa's switches
    main()
