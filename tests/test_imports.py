"""Imports form a tree: no cycle among anyformer's modules, neither at import time nor counting the
imports inside functions (run later, when the function first runs: a cycle there is only hidden), every
module of the train floor importable on its own, and no train module importing a floor above it.
The one exception is named in DELEGATES."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "anyformer"

# Models reach interop only through thin delegates inside methods (docs/layout.md: `ViT.from_timm`):
# the interop module that converts a family imports its model class at import time, and the model's
# method imports that interop module when it is called, once both are loaded. These (module, imported
# module) edges, made inside functions only, are the one exception to "no cycle"; no other may close one.
DELEGATES = {
    ("anyformer.models.base", "anyformer.interop.onnx"),             # Model.export_onnx
    ("anyformer.models.gpt", "anyformer.interop.hf"),                # GPT.from_hf, GPT.to_hf
    ("anyformer.models.text_encoder", "anyformer.interop.hf_bert"),  # TextEncoder.from_hf
    ("anyformer.models.vit", "anyformer.interop.hf"),                # ViT.from_hf, ViT.to_hf
    ("anyformer.models.vit", "anyformer.interop.timm"),              # ViT.from_timm, ViT.to_timm
}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking(node: ast.AST) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, (ast.Name, ast.Attribute))
            and "TYPE_CHECKING" in ast.unparse(node.test))


def module_level_imports(name: str, path: Path, known: set[str], everywhere: bool = False) -> set[str]:
    """The anyformer modules `name` imports when it is imported: every import statement outside
    function bodies (at module level, in class bodies, under try/if/with/for), none under `if
    TYPE_CHECKING` (annotations only, never run); with `everywhere`, also those inside functions, at
    any depth. Relative imports are resolved; `from . import runtime` counts the module runtime."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST):
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
                for stmt in child.orelse:  # the `else:` of `if TYPE_CHECKING` is what runs
                    visit_one(stmt)
            elif everywhere or not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit_one(child)

    def visit_one(node: ast.AST):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "anyformer")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "anyformer":
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in known else target)
        else:
            visit(node)
    visit(ast.parse(path.read_text()))
    found.discard(name)
    return found


def with_packages(name: str, deps: set[str], known: set[str]) -> set[str]:
    """`deps` and the packages Python runs first to import them (`anyformer.models.generation`
    runs `anyformer/models/__init__.py`), but not those `name` itself lies in: they run before it."""
    parts = name.split(".")
    own = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    out = set(deps)
    for dep in deps:
        dparts = dep.split(".")
        out.update(p for i in range(1, len(dparts)) if (p := ".".join(dparts[:i])) in known and p not in own)
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := walk(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None
    for start in sorted(graph):
        if start not in state and (cycle := walk(start)):
            return cycle
    return None


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle for each group of modules that reach one another (each strongly connected component
    of more than one module): every separate circle is reported, not only the first."""
    reach: dict[str, set[str]] = {}

    def reached(node: str) -> set[str]:
        if node not in reach:
            seen, todo = set(), [node]
            while todo:
                for nxt in graph.get(todo.pop(), ()):
                    if nxt not in seen:
                        seen.add(nxt)
                        todo.append(nxt)
            reach[node] = seen
        return reach[node]
    cycles, placed = [], set()
    for node in sorted(graph):
        if node in placed or node not in reached(node):
            continue
        group = {n for n in reached(node) if node in reached(n)}
        placed |= group
        cycles.append(find_cycle({n: graph.get(n, set()) & group for n in group}))
    return cycles


def package_graph(everywhere: bool = False, packages: bool = True,
                  but: set[tuple[str, str]] = frozenset()) -> dict[str, set[str]]:
    """Each anyformer module -> the anyformer modules importing it runs (with `everywhere`, also
    those its functions import when they run), with the packages run on the way unless not
    `packages`; the edges in `but` left out, with the packages they alone would run."""
    mods = modules()
    known = set(mods)
    graph = {name: {d for d in module_level_imports(name, path, known, everywhere) if (name, d) not in but}
             for name, path in mods.items()}
    return {name: with_packages(name, deps, known) if packages else deps for name, deps in graph.items()}


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    two = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}, "e": {"a"}}
    assert find_cycles(two) == [["a", "b", "a"], ["c", "d", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_relative_and_function_level_imports_correctly(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("from . import runtime\nfrom .train.tasks import make_task\nfrom ..models import load\n"
                 "import anyformer.nn\ndef later():\n    from .viz import plot_curves\n"
                 "    for _ in range(2):\n        if True:\n            import anyformer.serve\n"
                 "class Later:\n    from .files import atomic_path\n    def m(self):\n        from .doctor import x\n"
                 "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .data import DataError\n"
                 "else:\n    from .shapes import pair\n")
    known = {"anyformer.runtime", "anyformer.train.tasks"}
    at_import = {"anyformer.runtime", "anyformer.train.tasks", "anyformer.nn", "anyformer.files", "anyformer.shapes"}
    assert module_level_imports("anyformer.cli", f, known) == at_import
    assert module_level_imports("anyformer.cli", f, known, everywhere=True) == at_import | {
        "anyformer.viz", "anyformer.serve", "anyformer.doctor"}
    got = module_level_imports("anyformer.train.trainer", f, known | {"anyformer.train.runtime"})
    assert got == {"anyformer.train.runtime", "anyformer.train.train.tasks", "anyformer.models", "anyformer.nn",
                   "anyformer.train.files", "anyformer.train.shapes"}
    known = {"anyformer", "anyformer.models", "anyformer.models.gpt", "anyformer.train", "anyformer.train.a"}
    assert with_packages("anyformer.train.b", {"anyformer.models.gpt", "anyformer.train.a"}, known) == {
        "anyformer.models.gpt", "anyformer.models", "anyformer.train.a"}


def test_no_import_cycle_in_the_package():
    graph = package_graph()
    assert "anyformer.train.trainer" in graph and "anyformer.train.tasks" in graph["anyformer.train.trainer"]
    cycles = find_cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_import_cycle_even_counting_imports_inside_functions():
    """An import deferred into a function only hides a cycle: tasks <-> lm did that once in train/,
    series_format <-> series_csv and bpe <-> tokenizers in data/. So imports point down counting
    those too: a dispatcher sits above what it picks, what two modules share has a module of its own,
    a function that needs a class only for its annotations imports it under `if TYPE_CHECKING`.
    Only the models' interop delegates (DELEGATES) may close a circle."""
    cycles = find_cycles(package_graph(everywhere=True, but=DELEGATES))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_models_reach_interop_only_through_the_named_delegates():
    """Each edge of DELEGATES is still made, inside functions only; no other models -> interop edge."""
    at_import, everywhere = package_graph(packages=False), package_graph(everywhere=True, packages=False)
    to_interop = {(name, d) for name, deps in everywhere.items() if name.startswith("anyformer.models")
                  for d in deps if d.startswith("anyformer.interop")}
    assert to_interop == DELEGATES
    assert not {(name, d) for name, d in DELEGATES if d in at_import[name]}


def test_only_the_package_imports_the_trainer():
    """protocol and helpers <- task files <- registry and recipes <- trainer <- the package: a
    module the trainer uses takes the trainer as an argument and names its class for annotations only."""
    graph = package_graph(everywhere=True)
    importers = sorted(name for name, deps in graph.items()
                       if name.startswith("anyformer.train.") and "anyformer.train.trainer" in deps)
    assert not importers, f"{importers} import the trainer"


def test_the_train_floor_imports_only_its_floor_and_those_below():
    """The layering (docs/layout.md): train may import models and data (and the shared files/shapes helpers and the speed plan), not the
    command line, viz or interop at import time."""
    allowed = ("anyformer.train", "anyformer.models", "anyformer.data", "anyformer.files", "anyformer.shapes",
               "anyformer.plan", "anyformer.nn")
    for name, deps in package_graph().items():
        if name.startswith("anyformer.train"):
            bad = sorted(d for d in deps if not d.startswith(allowed))
            assert not bad, f"{name} imports {bad}"


@pytest.mark.slow
def test_every_train_module_imports_on_its_own():
    """Each module of anyformer/train imported first, in a fresh anyformer (torch stays loaded):
    none relies on another having been imported before it."""
    names = [n for n in modules() if n.startswith("anyformer.train")]
    code = ("import importlib, sys, torch\n"
            f"for name in {names!r}:\n"
            "    for m in [m for m in sys.modules if m == 'anyformer' or m.startswith('anyformer.')]:\n"
            "        del sys.modules[m]\n"
            "    importlib.import_module(name)\n"
            f"print('imported', {len(names)})\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == f"imported {len(names)}"


@pytest.mark.slow
def test_the_subpackages_are_attributes_of_a_fresh_import():
    """`import anyformer as af; af.plan.prepare` in a new process: the lazy names reach the subpackages."""
    import subprocess
    import sys
    code = ("import anyformer as af; t = af.train; print(af.plan.prepare.__name__, af.models.ViT.__name__, "
            "af.data.read_idx.__name__, af.viz.__name__, af.open_run.__name__, af.train.Trainer.__name__); "
            "import anyformer.train.trainer; print(af.train is t, af.train.train.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["prepare", "ViT", "read_idx", "anyformer.viz", "open_run", "Trainer",
                                  "True", "train"]


@pytest.mark.slow
def test_a_language_model_run_imports_no_image_or_table_reader(tmp_path):
    """A run on text (one step, in a fresh process) never imports Pillow or pandas: the readers of other
    kinds of data cost about 0.4 s of every start."""
    text = tmp_path / "t.txt"
    text.write_text("to be or not to be, that is the question\n" * 200)
    code = ("import sys, anyformer as af\n"
            f"af.train.train('shakespeare-char', data={str(text)!r}, out={str(tmp_path / 'run')!r}, max_steps=1, "
            "eval_iters=1, batch_size=2, seq_len=16, progress=False, plots=False, "
            "model_overrides=dict(width=32, depth=1, heads=2, context=16))\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'PIL', 'pandas'}))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_every_name_the_data_packages_list_is_reached_on_first_use():
    """anyformer.data and anyformer.data.images import their names lazily: each listed name resolves."""
    import anyformer.data as data
    import anyformer.data.images as images
    for package in (data, images):
        assert set(package._EXPORTS) <= set(package.__all__)
        for name in package.__all__:
            assert getattr(package, name) is not None, f"{package.__name__}.{name}"
