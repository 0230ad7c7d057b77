"""Imports form a tree: no cycle among anyformer's modules at import time, every module of the
train floor importable on its own, and no train module importing a floor above it."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "anyformer"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking(node: ast.If) -> bool:
    return isinstance(node.test, (ast.Name, ast.Attribute)) and "TYPE_CHECKING" in ast.unparse(node.test)


def module_level_imports(name: str, path: Path, known: set[str], everywhere: bool = False) -> set[str]:
    """The anyformer modules `name` imports when it is imported: statements at module level (also
    inside try/if), not those inside functions or under `if TYPE_CHECKING`; with `everywhere`, also
    those inside functions (imported later, when the function first runs)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(body):
        for node in body:
            if everywhere and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.With)):
                visit(node.body)
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.split(".")[0] == "anyformer")
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] != "anyformer":
                    continue
                for alias in node.names:  # `from . import runtime` imports the module anyformer.runtime
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in known else target)
            elif isinstance(node, ast.If) and not _type_checking(node):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)
                visit(node.orelse)
                visit(node.finalbody)
    visit(ast.parse(path.read_text()).body)
    found.discard(name)
    return found


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


def package_graph(everywhere: bool = False) -> dict[str, set[str]]:
    mods = modules()
    return {name: module_level_imports(name, path, set(mods), everywhere) for name, path in mods.items()}


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_relative_and_function_level_imports_correctly(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("from . import runtime\nfrom .train.tasks import make_task\nfrom ..models import load\n"
                 "import anyformer.nn\ndef later():\n    from .viz import plot_curves\n"
                 "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .data import DataError\n")
    known = {"anyformer.runtime", "anyformer.train.tasks"}
    assert module_level_imports("anyformer.cli", f, known) == {"anyformer.runtime", "anyformer.train.tasks",
                                                              "anyformer.nn"}
    got = module_level_imports("anyformer.train.trainer", f, known | {"anyformer.train.runtime"})
    assert got == {"anyformer.train.runtime", "anyformer.train.train.tasks", "anyformer.models", "anyformer.nn"}


def test_no_import_cycle_in_the_package():
    graph = package_graph()
    assert "anyformer.train.trainer" in graph and "anyformer.train.tasks" in graph["anyformer.train.trainer"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_train_floor_is_a_tree_even_counting_imports_inside_functions():
    """An import deferred into a function only hides a cycle (tasks <-> lm did that once):
    protocol and helpers <- task files <- registry and recipes <- trainer."""
    graph = {name: {d for d in deps if d.startswith("anyformer.train.")}
             for name, deps in package_graph(everywhere=True).items() if name.startswith("anyformer.train.")}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
    assert "anyformer.train.trainer" not in set().union(*graph.values()), "only the package imports the trainer"


def test_the_data_floor_has_no_cycle_even_counting_imports_inside_functions():
    """A reader dispatched to inside a function once hid series_format <-> series_csv, and bpe <->
    tokenizers another: data/ keeps a dispatcher above its readers and shared pieces in their own module."""
    graph = {name: {d for d in deps if d.startswith("anyformer.data.")}
             for name, deps in package_graph(everywhere=True).items() if name.startswith("anyformer.data.")}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


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
