"""Import cycles among anyformer's modules, counting every import in a file: at module level, inside
functions and methods, and under `if TYPE_CHECKING:` (an import deferred into a function only hides
a cycle). Each module is parsed with `ast`, relative imports are resolved, and the strongly connected
components of the graph of anyformer modules are reported, with one cycle of each and the lines
that close it.

    python scripts/import_cycles.py                   # the cycles in anyformer/data, then elsewhere
    python scripts/import_cycles.py --within anyformer.train
    python scripts/import_cycles.py --root ../old-clone   # another checkout (e.g. before a change)

An edge goes to the module named (`from .x import f` -> x; `from . import x` -> x where x is a
module, else the package), not to the packages above it that Python also runs: a package's
`__init__` importing its own files is not counted as a cycle with them. Tests do not run this; see
tests/test_imports.py for the cycles they refuse.
"""
from __future__ import annotations

import argparse
import ast
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted((root / "anyformer").rglob("*.py"))}


# Where an import statement is, strongest first: an edge keeps the strongest of its imports.
KINDS = ("module level", "in a function", "TYPE_CHECKING")


def _type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def imports(name: str, path: Path, known: set[str], runtime: bool = False) -> dict[str, tuple[int, str]]:
    """The anyformer modules `name` imports anywhere in its file -> (line, kind) of its strongest import
    of each; with `runtime`, those under `if TYPE_CHECKING:` (never run) are left out."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, tuple[int, str]] = {}

    def add(target: str, line: int, kind: str) -> None:
        if target in known and target != name:
            if target not in found or KINDS.index(kind) < KINDS.index(found[target][1]):
                found[target] = (line, kind)

    def visit(node: ast.AST, kind: str) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno, kind)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # `from . import runtime` imports the module anyformer.runtime
                sub = f"{target}.{alias.name}"
                add(sub if sub in known else target, node.lineno, kind)
        if isinstance(node, ast.If) and _type_checking(node):
            if runtime:
                return
            kind = KINDS[2]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and kind == KINDS[0]:
            kind = KINDS[1]
        for child in ast.iter_child_nodes(node):
            visit(child, kind)

    visit(ast.parse(path.read_text(), str(path)), KINDS[0])
    return found


def components(graph: dict[str, dict[str, tuple[int, str]]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # iterative: the graph is deep enough to make recursion a worry
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, edges = work[-1]
            for w in edges:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1 or node in graph[node]:
                        out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def shortest_cycle(graph: dict[str, dict[str, tuple[int, str]]], comp: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, staying inside the component."""
    start, inside = comp[0], set(comp)
    prev: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v]):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w in inside and w not in prev:
                prev[w] = v
                queue.append(w)
    return [start]


def report(graph: dict[str, dict[str, tuple[int, str]]], comps: list[list[str]], paths: dict[str, Path], root: Path,
           note=lambda comp: "") -> None:
    if not comps:
        print("  none")
    for comp in comps:
        print(f"  {len(comp)} modules{note(comp)}: {', '.join(comp)}")
        cycle = shortest_cycle(graph, comp)
        for a, b in zip(cycle, cycle[1:]):
            line, kind = graph[a][b]
            print(f"    {a} -> {b}  ({paths[a].relative_to(root)}:{line}, {kind})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--within", default="anyformer.data",
                        help="report the cycles inside this package first (default: anyformer.data)")
    parser.add_argument("--runtime", action="store_true",
                        help="leave out the imports under `if TYPE_CHECKING:`, which never run")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to read (default: this one)")
    args = parser.parse_args()
    root = args.root.resolve()
    paths = modules(root)
    known = set(paths)
    graph = {name: imports(name, path, known, args.runtime) for name, path in paths.items()}
    comps = components(graph)
    prefix = args.within.rstrip(".")

    def inside(m: str) -> bool:
        return m == prefix or m.startswith(prefix + ".")
    # The cycles among the package's own modules: the graph restricted to them.
    sub = {m: {d: line for d, line in deps.items() if inside(d)} for m, deps in graph.items() if inside(m)}
    own = components(sub)
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} imports between them (those inside functions "
          f"{'' if args.runtime else 'and under TYPE_CHECKING '}included)")
    print(f"cycles within {prefix}:")
    report(sub, own, paths, root)
    print(f"cycles elsewhere in anyformer (components not inside {prefix}):")
    report(graph, [c for c in comps if not all(inside(m) for m in c)], paths, root,
           lambda comp: f", {sum(map(inside, comp))} of them in {prefix}" if any(map(inside, comp)) else "")


if __name__ == "__main__":
    main()
