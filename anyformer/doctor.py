"""`anyformer doctor`: the machine, the torch build, and the speed plan in force.

`report()` returns the text; `main(argv)` prints it (wiring into the CLI is one line).
`--measure` first plans the standard decisions for a default workload (the default MNIST model's
linear and attention shapes, amp and AdamW), so that a fresh machine shows a populated plan.
The text lives here, not in anyformer/plan/: the plan's code hash names its cache files, and a
change to how a report reads must not throw away every timing on record.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # torch is imported inside the functions: the CLI builds its parser before torch loads
    import torch

    from .plan.planner import Planner

DEFAULT_MODEL, DEFAULT_BATCH = "vit-mnist-fast", 128  # the default recipe's preset (it trains 4 of its blocks) and batch
# thread settings that change what is measured (runtime.configure sets the first two)
_OMP_ENV = ("OMP_PROC_BIND", "OMP_PLACES", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def as_ranges(cores: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    parts, start = [], None
    for i, c in enumerate(cores):
        if start is None:
            start = c
        if i + 1 == len(cores) or cores[i + 1] != c + 1:
            parts.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(parts)


def build_info() -> dict[str, str]:
    """The torch build's math libraries, from torch.__config__.show()."""
    import torch
    try:
        text = torch.__config__.show()
    except Exception:  # noqa: BLE001 - only a report; an odd build must not break it
        text = ""
    mkl = re.search(r"Math Kernel Library Version ([\w.\-]+)", text)
    dnn = re.search(r"(?:MKL-DNN|oneDNN) (v[\w.]+)", text)
    omp = re.search(r"OpenMP (\d+)", text)
    return {
        "mkl": (mkl.group(1) if mkl else "yes") if torch.backends.mkl.is_available() else "no",
        "onednn": (dnn.group(1) if dnn else "yes") if torch.backends.mkldnn.is_available() else "no",
        "openmp": (omp.group(1) if omp else "yes") if torch.backends.openmp.is_available() else "no",
    }


def _machine_lines() -> list[str]:
    import torch

    from .plan import host
    cpu = host.cpu_info()
    build = build_info()
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    bf16 = [f for f in cpu["flags"] if f in host.NATIVE_BF16_FLAGS]
    cuda = "not available"
    if torch.cuda.is_available():
        cuda = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return [
        "Machine",
        f"  CPU            {cpu['model']} ({platform.machine()})",
        f"  flags          {' '.join(cpu['flags']) or '(none of the relevant ones)'}",
        f"  native bf16    {'yes (' + ', '.join(bf16) + ')' if bf16 else 'no: bf16 is emulated through fp32'}",
        f"  cores          {os.cpu_count()} online; this thread may run on {as_ranges(cores)}"
        + (" (OpenMP binding pins it)" if os.environ.get("OMP_PROC_BIND") not in (None, "", "false") else ""),
        f"  torch          {torch.__version__}: MKL {build['mkl']}, oneDNN {build['onednn']}, "
        f"OpenMP {build['openmp']}, CPU capability {host.machine()['capability']}",
        f"  threads        {torch.get_num_threads()} (interop {torch.get_num_interop_threads()})"
        + "".join(f", {k}={os.environ[k]}" for k in _OMP_ENV if os.environ.get(k)),
        f"  CUDA           {cuda}",
        f"  plan code      {host.code_hash()} (a change to anyformer/plan/ is measured again); C++ {host.compiler()}",
    ]


def _entry_lines(key: str, e: dict[str, Any], margin: float) -> list[str]:
    from .plan import choices
    from .plan.timing import pick
    times = e["times"]
    choice = e["choice"]
    if e["decision"] in choices.decisions():  # the choice at the current margin
        d = choices.decision(e["decision"])
        choice = pick(times, d.stock, d.margin if d.margin is not None else margin)
    fastest = min(times, key=times.__getitem__) if times else None
    timed = "   ".join(f"{n} {_ms(t)}{'*' if n == fastest else ''}" for n, t in times.items()) or "nothing timed"
    line = f"      {timed}   -> {choice}"
    if e.get("measured_with"):
        line += "   [timed at " + ", ".join(f"{k}={v}" for k, v in e["measured_with"].items()) + "]"
    about = [f"planned in {_ms(e['seconds'])}" if isinstance(e.get("seconds"), (int, float)) else "",
             f"of which compiling {_ms(e['compile_s'])}" if isinstance(e.get("compile_s"), (int, float)) else "",
             f"timed on {e['timed']}" if isinstance(e.get("timed"), str) else ""]
    about_text = ", ".join(a for a in about if a)
    out = [f"    {key}" + (f"   ({about_text})" if about_text else ""), line]
    out += [f"      dropped {n}: {why}" for n, why in (e.get("dropped") or {}).items()]
    return out


def report(p: Planner | None = None) -> str:
    """The report `anyformer doctor` prints; reads the plan file, measures nothing."""
    from .limits import kept_line
    from .plan import choices, host, native, planner, store
    p = p or planner()
    lines = ["anyformer doctor", "", *_machine_lines(), "", "Plan"]
    try:
        snap = p.snapshot()
    except ValueError as e:  # a malformed ANYFORMER_PLAN: the one thing doctor must show, not hide
        path = store.plan_dir() / host.file_name(host.machine())
        return "\n".join([*lines, f"  cache file     {path}", f"  forced         INVALID: {e}"])
    path, entries = snap["path"], snap["entries"]
    exists = "exists" if path.exists() else "not written yet"
    forced = snap["forced"]
    known = choices.decisions()
    if forced:
        shown = ", ".join(f"{n}={choices.forced_choice(forced, n) or 'auto'}" for n in sorted(known))
        forced_text = f"{shown} (from {snap['forced_from']})"
    else:
        forced_text = f"nothing (from {snap['forced_from']}: {os.environ.get(choices.ENV_PLAN) or 'unset'})" \
            if snap["forced_from"] == choices.ENV_PLAN else "nothing (force() set to auto)"
    margins = ", ".join(f"{n} {d.margin:.0%}" for n, d in sorted(known.items()) if d.margin is not None)
    lines += [
        f"  cache file     {path} ({exists}, {len(entries)} decisions)",
        f"  machine key    {snap['machine'].get('key', '?')}",
        f"  forced         {forced_text}",
        f"  margin         {snap['margin']:.0%}{' (' + margins + ')' if margins else ''}; "
        f"timing budget {snap['budget_s']:g} s per decision",
        f"  planning time  {snap['file_planning_s']:.2f} s recorded in the cache file; "
        f"{snap['planning_s']:.2f} s in this process",
        "  decisions      " + "; ".join(f"{n}: {' | '.join(d.choices)}" for n, d in sorted(known.items())),
        f"  native kernels attention and GELU (fp32): {native.status()}",
        kept_line(),
    ]
    if entries:
        lines.append("  measured (median time per call; * fastest; -> the choice at the current margin)")
        for key in sorted(entries):
            lines += _entry_lines(key, entries[key], snap["margin"])
    else:
        lines.append("  measured       nothing yet (`anyformer doctor --measure` plans a default workload)")
    lines += [f"  note: {n}" for n in snap["notes"]]
    return "\n".join(lines)


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
    parser.add_argument("--limits", action="store_true",
                        help="measure the host's sustained matmul rate (fp32, bf16) and memory bandwidth (seconds)")
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
    if args.limits:
        from .limits import limit_lines
        print("\n".join(limit_lines()))
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
