"""The counts of issue 44 (the maths reads like the seeds; speed comes in through one door) and issue 57,
read from the source with `ast` and `tokenize`: run it before and after a change to the layout.

    python scripts/layout_counts.py                        # a table
    python scripts/layout_counts.py --json                 # the same, one JSON object
    python scripts/layout_counts.py --root ../old-clone    # another checkout (e.g. before a change)

Code lines are a function's lines that hold code: not blank, not comments, not its docstring.
A comment naming a machine is a line of a `#` comment, a docstring or a `//` comment (the C++ kernels)
that names a processor or card, or a date, in any case: `--details` lists where.

Issue 57's counts (None where the checkout lacks the file, class or function they read):
- `Trainer._run code lines`: as above, of `_run` in class Trainer of anyformer/train/trainer.py.
  Its `loop body code lines`: the code lines of the body (not the `else:`) of the largest `for` or
  `while` in `_run`, nested ones included, the largest being the one with the most; where `_run` holds
  no loop, the largest loop in the Trainer methods `_run` calls directly as `self.name(...)`.
- `Trainer attributes`: distinct names X stored as `self.X` (`=`, `: T =`, `+=`, tuple targets too)
  in the methods of Trainer; `self` taken literally.
- `Trainer attributes read by checkpoint save`: distinct X read as `<p>.X` (stores aside, method calls
  counted) in the function `save` of anyformer/train/checkpoint.py (module level first, else a method
  of a class there), <p> being its first parameter, `self` and `cls` aside, annotated with a type
  naming Trainer or named `t` or `...trainer...`.
- `cache[0]`: subscripts of a name or attribute `cache` by the constant 0; `last_only=True)[:, -1]`: a
  call with `last_only=True` subscripted by `[:, -1]`; `return_attention uses`: each keyword argument,
  parameter, name and attribute `return_attention` (strings aside); `forward_with_attention methods`:
  methods of that name defined in a class body; all across anyformer/.
- `test files over 400 lines`: files tests/**/*.py of more than 400 physical lines.
"""
from __future__ import annotations

import argparse
import ast
import io
import json
import re
import tokenize
from collections.abc import Callable
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


def code_lines(fn: ast.FunctionDef | ast.For | ast.AsyncFor | ast.While, source: list[str]) -> int:
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


# ---------------------------------------------------------------- issue 57: the trainer and a few idioms
TRAINER = "anyformer/train/trainer.py"
CHECKPOINT = "anyformer/train/checkpoint.py"
Loop = ast.For | ast.AsyncFor | ast.While


def class_def(tree: ast.Module | None, name: str) -> ast.ClassDef | None:
    """The module-level class `name` of `tree` (None for a missing module or class)."""
    found = [n for n in (tree.body if tree else []) if isinstance(n, ast.ClassDef) and n.name == name]
    return found[0] if found else None


def methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def largest_loop(fns: list[ast.AST], source: list[str]) -> Loop | None:
    """The loop in `fns` (nested ones too) whose body has the most code lines; the first of equals."""
    loops = [n for fn in fns for n in ast.walk(fn) if isinstance(n, Loop)]
    return max(loops, key=lambda n: code_lines(n, source), default=None)


def run_loop_lines(cls: ast.ClassDef, source: list[str]) -> int | None:
    """Code lines of the body of `_run`'s largest loop, or (when `_run` holds none, e.g. once it hands
    the loop to a helper) of the largest loop in the methods it calls as `self.name(...)`."""
    own = methods(cls)
    run = own.get("_run")
    if run is None:
        return None
    loop = largest_loop([run], source)
    if loop is None:
        called = {n.func.attr for n in ast.walk(run) if isinstance(n, ast.Call)
                  and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                  and n.func.value.id == "self"}
        loop = largest_loop([own[m] for m in sorted(called) if m in own], source)
    return None if loop is None else code_lines(loop, source)


def self_attributes(cls: ast.ClassDef) -> list[str]:
    """The names X that the methods of `cls` store as `self.X`: a Store context covers `=`, `: T =`,
    `+=` and tuple targets alike, while `self.X[i] = ...` (a read of X) does not count."""
    return sorted({n.attr for fn in methods(cls).values() for n in ast.walk(fn)
                   if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                   and isinstance(n.value, ast.Name) and n.value.id == "self"})


def trainer_param(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The first parameter of `fn` that is the trainer: annotated with Trainer, or named `t` or `*trainer*`."""
    a = fn.args
    for p in a.posonlyargs + a.args + a.kwonlyargs:
        note = ast.unparse(p.annotation) if p.annotation is not None else ""
        if p.arg not in ("self", "cls") and ("trainer" in note.lower() or p.arg == "t" or "trainer" in p.arg.lower()):
            return p.arg
    return None


def save_reads(tree: ast.Module | None) -> list[str] | None:
    """The attributes that checkpoint's `save` reads from its trainer parameter: what a checkpoint
    depends on. None where there is no `save` or it takes no trainer."""
    if tree is None:
        return None
    fns = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "save"]
    fns += [m for c in tree.body if isinstance(c, ast.ClassDef) for name, m in methods(c).items() if name == "save"]
    param = trainer_param(fns[0]) if fns else None
    if param is None:
        return None
    return sorted({n.attr for n in ast.walk(fns[0]) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)
                   and isinstance(n.value, ast.Name) and n.value.id == param})


NOT_LITERAL = object()


def literal(node: ast.AST) -> object:
    """The value of a literal node (`-1` parses as a minus applied to 1), or NOT_LITERAL for anything else."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return NOT_LITERAL


def is_int(node: ast.AST, value: int) -> bool:
    v = literal(node)
    return type(v) is int and v == value  # `cache[False]` is no `cache[0]`


def is_cache_zero(node: ast.AST) -> bool:
    """`cache[0]` or `x.cache[0]`."""
    if not isinstance(node, ast.Subscript) or not is_int(node.slice, 0):
        return False
    v = node.value
    return (isinstance(v, ast.Name) and v.id == "cache") or (isinstance(v, ast.Attribute) and v.attr == "cache")


def is_last_only_tail(node: ast.AST) -> bool:
    """`f(..., last_only=True)[:, -1]`: the last position asked for twice."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call)
            and any(k.arg == "last_only" and literal(k.value) is True for k in node.value.keywords)):
        return False
    s = node.slice
    return (isinstance(s, ast.Tuple) and len(s.elts) == 2 and isinstance(s.elts[0], ast.Slice)
            and s.elts[0].lower is None and s.elts[0].upper is None and s.elts[0].step is None
            and is_int(s.elts[1], -1))


def return_attention_uses(tree: ast.Module) -> list[int]:
    """The lines of each keyword argument, parameter, name and attribute `return_attention` in `tree`."""
    name = "return_attention"
    return sorted(n.lineno for n in ast.walk(tree)
                  if (isinstance(n, ast.keyword) and n.arg == name) or (isinstance(n, ast.arg) and n.arg == name)
                  or (isinstance(n, ast.Name) and n.id == name) or (isinstance(n, ast.Attribute) and n.attr == name))


def long_test_files(limit: int = 400) -> list[str] | None:
    """'path: lines' of each tests/**/*.py longer than `limit` lines (None without a tests/ folder)."""
    tests = ROOT / "tests"
    if not tests.is_dir():
        return None
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in sorted(tests.rglob("*.py"))}
    return [f"{p}: {n}" for p, n in sizes.items() if n > limit]


def nn_forward_overrides(mods: dict[str, ast.Module]) -> list[str]:
    """'path:Class' of each class in plan/ that subclasses an attention layer of nn/ and writes its own
    forward: what runs there is not what nn/ shows."""
    def base_names(c: ast.ClassDef) -> set[str]:  # `MultiHeadAttention` or `nn.MultiHeadAttention`
        return {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in c.bases}

    return [f"{p}:{c.name}" for p, t in mods.items() if p.startswith("anyformer/plan/") for c in ast.walk(t)
            if isinstance(c, ast.ClassDef) and "MultiHeadAttention" in base_names(c) and "forward" in methods(c)]


def is_width_mod_heads(node: ast.AST) -> bool:
    """`width % heads` in any spelling (`config.width % config.heads`, `self.width % self.heads`)."""
    def name(n: ast.AST) -> str:
        return n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else ""
    return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod)
            and name(node.left) == "width" and name(node.right) == "heads")


def writes_training_kernel(node: ast.AST) -> bool:
    """An assignment to some object's `training_kernel` or `planned_training` (a class body's default is a
    plain name, not counted)."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
    return any(isinstance(t, ast.Attribute) and t.attr in ("training_kernel", "planned_training") for t in targets)


def where(mods: dict[str, ast.Module], test: Callable[[ast.AST], bool]) -> list[str]:
    """'path:line' of each node in `mods` that passes `test`."""
    return [f"{p}:{n.lineno}" for p, t in mods.items() for n in ast.walk(t) if test(n)]


def issue57_counts(mods: dict[str, ast.Module], sources: dict[str, list[str]]) -> dict[str, object]:
    trainer = class_def(mods.get(TRAINER), "Trainer")
    source = sources.get(TRAINER, [])
    run = methods(trainer).get("_run") if trainer else None
    attrs = self_attributes(trainer) if trainer else None
    reads = save_reads(mods.get(CHECKPOINT))
    cache0, last_only = where(mods, is_cache_zero), where(mods, is_last_only_tail)
    ret_attn = [f"{p}:{line}" for p, t in mods.items() for line in return_attention_uses(t)]
    fwa = [f"{p}:{c.name}" for p, t in mods.items() for c in ast.walk(t) if isinstance(c, ast.ClassDef)
           and "forward_with_attention" in methods(c)]
    long_tests = long_test_files()
    overrides, heads_checks = nn_forward_overrides(mods), where(mods, is_width_mod_heads)
    kernel_files = sorted({w.split(":")[0] for w in where({p: t for p, t in mods.items() if p.startswith("anyformer/")},
                                                           writes_training_kernel)})
    return {
        "Trainer._run code lines": None if run is None else code_lines(run, source),
        "Trainer._run loop body code lines": run_loop_lines(trainer, source) if trainer else None,
        "train/trainer.py lines": len(source) if TRAINER in sources else None,
        "Trainer attributes": None if attrs is None else len(attrs),
        "Trainer attributes read by checkpoint save": None if reads is None else len(reads),
        "cache[0] occurrences": len(cache0),
        "last_only=True)[:, -1] occurrences": len(last_only),
        "return_attention uses": len(ret_attn),
        "forward_with_attention methods": len(fwa),
        "test files over 400 lines": None if long_tests is None else len(long_tests),
        "attention layers in plan/ with a forward of their own": len(overrides),
        "width % heads checks": len(heads_checks),
        "files writing a linear layer's training kernel": len(kernel_files),
        "_Trainer attributes": attrs or [], "_Trainer attributes read by checkpoint save": reads or [],
        "_cache[0]": cache0, "_last_only=True)[:, -1]": last_only, "_return_attention uses": ret_attn,
        "_forward_with_attention methods": fwa, "_test files over 400 lines": long_tests or [],
        "_attention layers in plan/ with a forward of their own": overrides, "_width % heads checks": heads_checks,
        "_files writing a linear layer's training kernel": kernel_files,
    }


def counts() -> dict[str, object]:
    mods = modules()
    sources = {p: (ROOT / p).read_text().splitlines() for p in mods}

    def lines_of(path: str, cls: str | None, name: str) -> int | None:
        fn = find(mods[path], cls, name) if path in mods else None
        return None if fn is None else code_lines(fn, sources[path])

    importers = sorted(p for p, t in mods.items() if not p.startswith("anyformer/plan/") and imports_plan(p, t))
    maths = [p for p in importers if p.startswith(("anyformer/nn/", "anyformer/models/"))]
    # `in mods`, .exists(): a checkout without these files gets None and False rather than a crash
    block = find(mods["anyformer/nn/transformer.py"], "TransformerBlock", "forward") \
        if "anyformer/nn/transformer.py" in mods else None
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
    nn_init_path = ROOT / "anyformer" / "nn" / "__init__.py"
    nn_init = nn_init_path.read_text() if nn_init_path.exists() else ""
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
        **issue57_counts(mods, sources),
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
