"""One eager cached decoding step, this checkout against an earlier commit, in one process.

Two trees timed in separate processes differ by more than a refactor does: each process gets its own
memory layout, thread placement and neighbours' load, and a 7% difference between two such processes
(docs/results.md, issue 57's rounds) could not be told from a change in the code. Here both trees run in
the same process on the same weights: the earlier commit's `anyformer/` is unpacked (`git archive`) as the
package `anyformer_before` (its absolute imports renamed), both build the char GPT (GPT-2 maths, depth 6,
width 384, 65 symbols, context 512), each fills its own cache with the same 256-token prompt, and one
more token's forward (generate's eager step: inference mode, batch 1, the LM head on the last position)
is timed in alternated rounds, the first of each round alternating; a round keeps the fastest of
`--per-round` calls, each from the same position. The two steps' logits are checked equal first.

    python benchmarks/bench_decode_versions.py --before b0397a8        # writes results/<cpu>/decode_versions.md
    python benchmarks/bench_decode_versions.py --before HEAD~3 --rounds 10 --no-write
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from bench_common import ROOT, RESULTS, machine, setup_env, table, write_results

PACKAGE = "anyformer_before"
SHAPE = dict(depth=6, heads=6, width=384, vocab_size=65, context=512)
PREFIX = 256


def unpack(rev: str, into: Path) -> str:
    """`rev`'s anyformer/ as the package `anyformer_before` under `into`; returns the commit's short hash."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], capture_output=True, text=True,
                            check=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "anyformer"], capture_output=True,
                             check=True).stdout
    tar = into / "tree.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")
    (into / "anyformer").rename(into / PACKAGE)
    # Absolute imports and module paths in strings: the package's relative imports need no change.
    for f in (into / PACKAGE).rglob("*.py"):
        text = f.read_text()
        new = re.sub(r"(\bfrom |\bimport |[\"'])anyformer(?=[. \"'\n])", lambda m: m.group(1) + PACKAGE, text)
        if new != text:
            f.write_text(new)
    return commit


def cached_step(package, prompt, tok):
    """(rewind, step) for `package`'s GPT: a cache holding `prompt`; step() times one more token from it."""
    import torch
    torch.manual_seed(0)
    gpt = package.GPT.preset("gpt2", **SHAPE).eval()
    with torch.inference_mode():
        cache = gpt.new_cache(1, PREFIX + 1)
        gpt(prompt, cache=cache)

    def rewind() -> None:  # back to the prompt's end: every timed step does the same work
        if hasattr(cache, "position"):  # one cache for the model, a tensor position
            cache.position.fill_(PREFIX)
        else:  # a list of per-layer caches, each with its own length
            for layer in cache:
                layer.length = PREFIX

    def step():
        with torch.inference_mode():
            rewind()
            t = time.perf_counter()
            logits = gpt(tok, cache=cache, last_only=True)[:, -1]
            return time.perf_counter() - t, logits
    return gpt, step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the earlier commit (any git revision)")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--per-round", type=int, default=20)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    setup_env()
    import torch

    import anyformer as af
    with tempfile.TemporaryDirectory() as tmp:
        commit = unpack(args.before, Path(tmp))
        sys.path.insert(0, tmp)
        import anyformer_before as before
        if not before.__file__.startswith(tmp):
            sys.exit(f"anyformer_before came from {before.__file__}, not the unpacked {args.before}")
        prompt = torch.randint(0, SHAPE["vocab_size"], (1, PREFIX), generator=torch.Generator().manual_seed(2))
        tok = torch.zeros(1, 1, dtype=torch.long)
        old_gpt, old = cached_step(before, prompt, tok)
        new_gpt, new = cached_step(af, prompt, tok)
        old_gpt.load_state_dict(new_gpt.state_dict())
        if not torch.equal(old()[1], new()[1]):
            sys.exit("the two trees' logits differ on the same weights: not the same step")
        steps = {f"before ({commit})": old, "this checkout": new}
        times: dict[str, list[float]] = {k: [] for k in steps}
        for r in range(args.rounds):
            for name in (list(steps) if r % 2 else list(steps)[::-1]):
                times[name].append(min(steps[name]()[0] for _ in range(args.per_round)) * 1e3)
    (b_name, b), (n_name, n) = [(k, statistics.median(v)) for k, v in times.items()]
    wins = sum(x < y for x, y in zip(times[n_name], times[b_name]))
    print(f"one eager cached step after {PREFIX} tokens, median of {args.rounds} alternated rounds: {b_name} "
          f"{b:.3f} ms, {n_name} {n:.3f} ms, ratio {n / b:.3f}; this checkout faster in {wins} of {args.rounds}")
    if args.no_write:
        return
    rows = [[k, f"{statistics.median(v):.3f}", f"{min(v):.3f}", f"{max(v):.3f}"] for k, v in times.items()]
    text = (table(["tree", "median ms", "fastest round", "slowest round"], rows)
            + f"\n\nThis checkout over the earlier commit: **x{n / b:.3f}** (median over median); faster in "
            f"{wins} of {args.rounds} rounds.")
    write_results(RESULTS / "decode_versions.md", "One eager cached decoding step: this checkout against an "
                  "earlier commit, in one process", __doc__.split("\n\n")[1].replace("\n", " "),
                  {**machine(), "before": commit, "rounds": str(args.rounds)}, [("Step time", text)])


if __name__ == "__main__":
    main()
