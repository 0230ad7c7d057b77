"""`anyformer doctor`: the machine, the torch build, and the speed plan in force.

`report()` returns the text; `main(argv)` prints it (wiring into the CLI is one line).
`--measure` first plans the standard decisions for a default workload (the default MNIST model's
linear and attention shapes, amp and AdamW), so that a fresh machine shows a populated plan.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # torch is imported inside the functions: the CLI builds its parser before torch loads
    import torch

    from .plan.planner import Planner

DEFAULT_MODEL, DEFAULT_BATCH = "vit-mnist-fast", 128  # the default recipe's preset (it trains 4 of its blocks) and batch


def report(p: Planner | None = None) -> str:
    """The report `anyformer doctor` prints; reads the plan file, measures nothing."""
    from .plan.report import report as plan_report
    return plan_report(p)


def _shapes(model: torch.nn.Module, x: torch.Tensor) -> tuple[Counter, list[tuple[int, int, int, int]]]:
    """Run one forward (plan forced to stock: shapes only) and record what each linear layer and
    attention layer saw: ((rows, in, out) counts, [(batch, heads, tokens, head_dim)])."""
    import torch

    from . import plan
    linears: Counter = Counter()
    attns: list[tuple[int, int, int, int]] = []
    hooks = []
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            hooks.append(m.register_forward_pre_hook(
                lambda mod, args: linears.update([(args[0].numel() // args[0].shape[-1], mod.in_features,
                                                   mod.out_features)])))
        elif type(m).__name__ == "MultiHeadAttention" and hasattr(m, "heads") and hasattr(m, "head_dim"):
            hooks.append(m.register_forward_pre_hook(
                lambda mod, args: attns.append((args[0].shape[0], mod.heads, args[0].shape[1], mod.head_dim))))
    try:
        with plan.forcing("stock"), torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return linears, attns


def _build(model_name: str, **overrides: Any) -> tuple[torch.nn.Module, Any]:
    """(model, make_input(batch)) for an image or GPT preset."""
    import torch

    import anyformer as af
    import anyformer.models  # noqa: F401 - af.models is loaded on first use
    vit_presets, gpt_presets = af.models.presets_of("vit"), af.models.presets_of("gpt")
    if model_name in vit_presets:
        model = af.ViT.preset(model_name, **overrides)
        c = model.config
        size = tuple(c.image_size) if isinstance(c.image_size, (tuple, list)) else (c.image_size, c.image_size)
        return model, lambda b: torch.zeros(b, c.in_chans, *size)
    if model_name in gpt_presets:
        model = af.GPT.preset(model_name, **overrides)
        return model, lambda b: torch.zeros(b, model.config.context, dtype=torch.long)
    raise ValueError(f"doctor --measure takes an image or GPT preset; got {model_name!r}, expected one of "
                     f"{', '.join(vit_presets + gpt_presets)}")


def measure_default(model_name: str = DEFAULT_MODEL, batch: int = DEFAULT_BATCH) -> list[str]:
    """Plan the decisions a training run of `model_name` at `batch` asks for; returns
    'question -> choice' lines. Decisions already in the plan file cost nothing."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"--batch must be a positive int, got {batch!r}")
    import torch

    from . import plan
    # Every block has the same layers: two blocks (a classifier's last one may query its class token
    # only) and one sample show every shape (rows scale with the batch) at a fraction of the cost;
    # the optimiser's view needs every parameter, but no data.
    small, make_input = _build(model_name, depth=2)
    linears, attns = _shapes(small, make_input(1))
    with torch.device("meta"):
        full, _ = _build(model_name)
    causal = getattr(full, "family", "") == "gpt"
    done = []
    if attns:
        _, heads, n, hd = attns[0]
        width = heads * hd
        # the MLP's hidden width: a layer width -> h whose output feeds a layer h -> width
        hidden = next((o for (r, i, o) in sorted(linears) if i == width and o != width and (r, o, width) in linears),
                      4 * width)
        amp = plan.amp_dtype("cpu", width=width, hidden=hidden, rows=batch * n)
        done.append(f"amp width={width} hidden={hidden} rows={batch * n} -> {amp}")
        for training in (True, False):
            dtype = torch.bfloat16 if amp == "bf16" and training else torch.float32
            for (_, heads, n, hd) in sorted(set(attns)):
                choice = plan.attention_kernel(batch, heads, n, n, hd, dtype, causal, training)
                done.append(f"attention B={batch} H={heads} N={n} D_h={hd} {dtype} causal={causal} "
                            f"training={training} -> {choice}")
    for (rows, i, o) in sorted(linears):
        for training in (True, False):
            choice = plan.linear_kernel(rows * batch, i, o, torch.float32, training)
            done.append(f"linear rows={rows * batch} in={i} out={o} training={training} -> {choice}")
    params = [p for p in full.parameters() if p.requires_grad]
    choice = plan.adamw_impl(params, device="cpu")
    done.append(f"adamw {len(params)} tensors, {sum(p.numel() for p in params):,} parameters -> {choice}")
    return done


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `anyformer doctor`, for the CLI's subparser."""
    parser.add_argument("--measure", action="store_true",
                        help="plan the decisions of a default workload first (measures what is not cached)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"preset for --measure (default {DEFAULT_MODEL})")
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH, help=f"batch for --measure (default {DEFAULT_BATCH})")
    parser.add_argument("--clear", action="store_true", help="delete this machine's plan file first")
    parser.add_argument("run", nargs="?", help="a run directory: also show the plan it trained with (its plan.json)")


def run(args: argparse.Namespace) -> int:
    """Print the report (after --clear / --measure); 2 if ANYFORMER_PLAN is malformed."""
    from . import plan
    from .plan import host
    p = plan.planner()
    if args.clear:
        path = plan.plan_dir() / host.file_name(host.machine())
        path.unlink(missing_ok=True)
        p.reset()
        print(f"removed {path}")
    if args.measure:
        for line in measure_default(args.model, args.batch):
            print(f"planned: {line}")
        print()
    text = report(p)
    print(text)
    if args.run:
        print(run_plan_lines(args.run))
    return 2 if "forced         INVALID" in text else 0


def run_plan_lines(run_dir: str) -> str:
    """The plan a run trained with (and replays on --resume), as its plan.json holds it."""
    from .train.runplan import read_plan
    recorded = read_plan(run_dir)
    lines = [f"Run plan       {run_dir}: compile {recorded['compile'] or '-'}, linears {recorded['linears'] or '-'}, "
             f"{len(recorded['answers'])} kernel choices"]
    lines += [f"  {choice:<9} {key}" for key, choice in sorted(recorded["answers"].items())]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="anyformer doctor", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
