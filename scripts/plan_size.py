"""How much of the package the speed plan is, at a git revision: issue 27's line counts, reproducible.

    python scripts/plan_size.py [REV ...]        # default: HEAD

Four counts per revision:
- plan/: the lines of anyformer/plan's Python files, and of its C++;
- the plan's own modules elsewhere (train/planning.py, train/runplan.py, models/decode_plan.py);
- hooks: in the other files of nn, models and train, the lines of every function (or top-level
  statement) whose code names something imported from anyformer.plan or from those modules, whole:
  the code that exists to ask the plan, and the code around each question;
- the share of the package's lines (Python and C++) that these add up to.
A function that asks the plan once counts whole, so "hooks" is an upper bound of the code that
serves the plan, and the same bound at every revision.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

OWN = ("planning.py", "runplan.py", "decode_plan.py")
HOOK_DIRS = ("anyformer/nn", "anyformer/models", "anyformer/train")
REPO = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True, cwd=REPO).stdout


def _lines(rev: str, path: str) -> int:
    return len(_git("show", f"{rev}:{path}").splitlines())


def _from_plan(node: ast.AST) -> bool:
    """`from ..plan(.x) import ...`, `from .planning import ...`, or `from . import decode_plan`."""
    if not isinstance(node, ast.ImportFrom) or node.level < 1:
        return False
    if node.module is None:
        return any(alias.name + ".py" in OWN for alias in node.names)
    return node.module.split(".")[0] == "plan" or node.module + ".py" in OWN


def _hook_lines(source: str) -> int:
    """Lines of the functions and top-level statements of `source` that name a plan import."""
    tree = ast.parse(source)
    names = {alias.asname or alias.name for node in ast.walk(tree) if _from_plan(node) for alias in node.names
             if node.module or alias.name + ".py" in OWN}
    if not names:
        return 0
    counted: set[int] = set()

    def asks(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))

    def visit(body: list[ast.stmt]) -> None:
        for statement in body:
            if isinstance(statement, ast.ClassDef):
                visit(statement.body)
            elif _from_plan(statement):
                counted.update(range(statement.lineno, statement.end_lineno + 1))
            elif asks(statement):
                first = min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", []))])
                counted.update(range(first, statement.end_lineno + 1))
    visit(tree.body)
    return len(counted)


def count(rev: str) -> dict[str, int]:
    files = _git("ls-tree", "-r", "--name-only", rev, "anyformer").split()
    python = [f for f in files if f.endswith(".py")]
    plan_py = sum(_lines(rev, f) for f in python if f.startswith("anyformer/plan/"))
    plan_cpp = sum(_lines(rev, f) for f in files if f.startswith("anyformer/plan/") and f.endswith(".cpp"))
    elsewhere = [f for f in python if f.startswith(HOOK_DIRS)]
    own = sum(_lines(rev, f) for f in elsewhere if f.rsplit("/", 1)[-1] in OWN)
    hooks = sum(_hook_lines(_git("show", f"{rev}:{f}")) for f in elsewhere if f.rsplit("/", 1)[-1] not in OWN)
    package = sum(_lines(rev, f) for f in python) + sum(_lines(rev, f) for f in files if f.endswith(".cpp"))
    return {"plan_py": plan_py, "plan_cpp": plan_cpp, "own_elsewhere": own, "hooks": hooks, "package": package}


def main() -> None:
    for rev in sys.argv[1:] or ["HEAD"]:
        c = count(rev)
        total = c["plan_py"] + c["plan_cpp"] + c["own_elsewhere"] + c["hooks"]
        print(f"{rev}: plan/ {c['plan_py']} Python + {c['plan_cpp']} C++; its own modules in nn, models and train "
              f"{c['own_elsewhere']}; hooks {c['hooks']}; in all {total} of {c['package']} "
              f"({100 * total / c['package']:.1f}% of the package)")


if __name__ == "__main__":
    main()
