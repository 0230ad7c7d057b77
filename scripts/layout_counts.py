"""The counts of issue 44 (the maths reads like the seeds; speed comes in through one door), read from
the source with `ast` and `tokenize`: run it before and after a change to the layout.

    python scripts/layout_counts.py                        # a table
    python scripts/layout_counts.py --json                 # the same, one JSON object
    python scripts/layout_counts.py --root ../old-clone    # another checkout (e.g. before a change)

Code lines are a function's lines that hold code: not blank, not comments, not its docstring.
A comment naming a machine is a line of a `#` comment, a docstring or a `//` comment (the C++ kernels)
that names a processor or card, or a date, in any case: `--details` lists where.
"""
from __future__ import annotations

import argparse
import ast
import io
import json
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A comment that names a machine a measurement ran on, or the day it ran, belongs in docs/results.md:
# the code's comments say why a choice holds. Case does not matter ("amd-epyc" in a results path counts).
MACHINE_WORDS = re.compile(r"\b(epyc|xeon|zen ?\d?|cascade ?lake|ice ?lake|sapphire ?rapids|skylake|ryzen|graviton"
                           r"|a100|h100|h200)s?\b|\b(19|20)\d\d-[01]\d-[0-3]\d\b", re.IGNORECASE)


def modules() -> dict[str, ast.Module]:
    return {p.relative_to(ROOT).as_posix(): ast.parse(p.read_text(), str(p))
            for p in sorted((ROOT / "anyformer").rglob("*.py"))}


def imports_plan(path: str, tree: ast.Module) -> bool:
    """Whether the module at `path` imports anything from anyformer.plan (at any depth, lazily too)."""
    package = path.removesuffix(".py").split("/")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            if any(a.name == "anyformer.plan" or a.name.startswith("anyformer.plan.") for a in node.names):
                return True
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if target == "anyformer.plan" or target.startswith("anyformer.plan."):
                return True
            if target == "anyformer" and any(a.name == "plan" for a in node.names):
                return True
    return False


def code_lines(fn: ast.FunctionDef, source: list[str]) -> int:
    """Lines of `fn`'s body that hold code (its docstring, comments and blank lines left out)."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if not body:
        return 0
    lines = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if hasattr(node, "lineno"):
                lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return sum(1 for n in lines if (s := source[n - 1].strip()) and not s.startswith("#"))


def find(tree: ast.Module, cls: str | None, name: str) -> ast.FunctionDef | None:
    scope = tree.body
    if cls is not None:
        found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
        if not found:
            return None
        scope = found[0].body
    for n in scope:
        if isinstance(n, ast.FunctionDef) and n.name == name:
            return n
    return None


def docstrings(tree: ast.Module) -> list[ast.Constant]:
    """The module's, its classes' and its functions' docstrings."""
    owners = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef,
                                                                   ast.AsyncFunctionDef))]
    return [o.body[0].value for o in owners if o.body and isinstance(o.body[0], ast.Expr)
            and isinstance(o.body[0].value, ast.Constant) and isinstance(o.body[0].value.value, str)]


def machine_comments(path: Path) -> list[str]:
    """'path:line' of each comment line and docstring line in `path` that names a machine or a date."""
    text = path.read_text()
    if path.suffix != ".py":   # C and C++: the `//` comments
        lines = [(i, line[line.index("//"):]) for i, line in enumerate(text.splitlines(), 1) if "//" in line]
    else:
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        lines = [(t.start[0], t.string) for t in tokens if t.type == tokenize.COMMENT]
        for doc in docstrings(ast.parse(text, str(path))):
            lines += [(doc.lineno + i, line) for i, line in enumerate(doc.value.splitlines())]
    rel = path.relative_to(ROOT).as_posix()
    return [f"{rel}:{n}" for n, line in sorted(set(lines)) if MACHINE_WORDS.search(line)]


def counts() -> dict[str, object]:
    mods = modules()
    sources = {p: (ROOT / p).read_text().splitlines() for p in mods}

    def lines_of(path: str, cls: str | None, name: str) -> int | None:
        fn = find(mods[path], cls, name) if path in mods else None
        return None if fn is None else code_lines(fn, sources[path])

    importers = sorted(p for p, t in mods.items() if not p.startswith("anyformer/plan/") and imports_plan(p, t))
    maths = [p for p in importers if p.startswith(("anyformer/nn/", "anyformer/models/"))]
    block = find(mods["anyformer/nn/transformer.py"], "TransformerBlock", "forward")
    sink_sigs = [f"{p}:{n.name}" for p, t in mods.items() for n in ast.walk(t)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and any(a.arg == "sink" for a in n.args.args + n.args.kwonlyargs)]
    decode_steps = [f"{p}:{n.lineno}" for p, t in mods.items() for n in ast.walk(t)
                    if isinstance(n, ast.FunctionDef) and n.name == "decode_step"]
    decode_files = [p for p in mods if re.search(r"decod|generat", Path(p).stem) and p.startswith("anyformer/models/")]
    cache = [n for t in mods.values() for n in t.body if isinstance(n, ast.ClassDef) and n.name == "KVCache"]
    cache_fills = sorted(f.name for c in cache for f in c.body if isinstance(f, ast.FunctionDef)
                         and f.name in ("append", "write", "update"))
    plan_named = sorted(p for p in mods if "plan" in Path(p).stem and not p.startswith("anyformer/plan/"))
    planned_attrs = sorted({f"{p}:{n.attr}" for p, t in mods.items() for n in ast.walk(t)
                            if isinstance(n, ast.Attribute) and n.attr.startswith("_planned")})
    machine = [hit for p in sorted((ROOT / "anyformer").rglob("*"))
               if p.suffix in (".py", ".cpp", ".c", ".h") for hit in machine_comments(p)]
    nn_init = (ROOT / "anyformer" / "nn" / "__init__.py").read_text()
    return {
        "MultiHeadAttention.forward code lines": lines_of("anyformer/nn/attention.py", "MultiHeadAttention", "forward"),
        "files in nn/ and models/ importing the plan": len(maths),
        "files outside plan/ importing the plan": len(importers),
        "GPT.stream code lines": lines_of("anyformer/models/gpt.py", "GPT", "stream"),
        "generation loop code lines (models/generation.py stream)": lines_of("anyformer/models/generation.py", None,
                                                                             "stream"),
        "functions named decode_step": len(decode_steps),
        "decode modules in models/": len(decode_files),
        "KVCache fill methods": ", ".join(cache_fills),
        "TransformerBlock.forward keyword arguments": None if block is None else len(block.args.kwonlyargs),
        "signatures with a sink parameter": len(sink_sigs),
        "modules outside plan/ named for the plan": len(plan_named),
        "attributes named _planned": len(planned_attrs),
        "anyformer.nn.Linear is a planned subclass": bool(re.search(r"Linear\s*=\s*PlannedLinear|\bLinear,", nn_init)
                                                          and "PlannedLinear" in nn_init),
        "checkpoint modules in train/": len([p for p in mods if re.match(r"anyformer/train/checkpoint", p)]),
        "comments naming a machine": len(machine),
        "_importers": importers, "_sink signatures": sink_sigs, "_decode_step": decode_steps,
        "_plan-named modules": plan_named, "_comments naming a machine": machine,
    }


def main() -> None:
    global ROOT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object")
    ap.add_argument("--details", action="store_true", help="list the files behind the counts too")
    ap.add_argument("--root", type=Path, default=None, help="the checkout to count (default: this one)")
    args = ap.parse_args()
    ROOT = (args.root or ROOT).resolve()
    c = counts()
    if args.json:
        print(json.dumps(c, indent=1))
        return
    print("| count | value |\n|---|---:|")
    for k, v in c.items():
        if not k.startswith("_"):
            print(f"| {k} | {v} |")
    if args.details:
        for k, v in c.items():
            if k.startswith("_"):
                print(f"\n{k[1:]}:\n  " + "\n  ".join(v))


if __name__ == "__main__":
    main()
