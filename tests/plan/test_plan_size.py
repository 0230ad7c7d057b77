"""scripts/plan_size.py: the hooks it counts are the functions that ask the plan, whole, and nothing else."""
import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("plan_size", ROOT / "scripts" / "plan_size.py")
plan_size = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plan_size)

SOURCE = '''\
from ..plan import planner
from .runplan import write_plan
import torch


def asks():
    x = 1
    return planner().forced()


class Layer:
    @staticmethod
    def writes(where):
        write_plan(where, {})

    def plain(self):
        return torch.zeros(1)


CONSTANT = 3
'''


def test_hooks_are_the_plan_imports_and_the_functions_that_use_them_counted_whole() -> None:
    # the two imports (2), asks() (3 lines), writes() with its decorator (3): 8; plain() and the rest not
    assert plan_size._hook_lines(SOURCE) == 8


def test_a_file_that_imports_nothing_of_the_plan_has_no_hooks() -> None:
    assert plan_size._hook_lines("import torch\n\n\ndef f():\n    return torch.ones(1)\n") == 0


def test_the_counts_at_head_add_up_to_the_files_in_plan() -> None:
    try:
        counts = plan_size.count("HEAD")
    except (subprocess.CalledProcessError, FileNotFoundError):
        pytest.skip("not a git checkout")
    on_disk = sum(len(p.read_text().splitlines()) for p in (ROOT / "anyformer" / "plan").rglob("*.py"))
    committed = subprocess.run(["git", "status", "--porcelain", "anyformer/plan"], cwd=ROOT,
                               capture_output=True, text=True).stdout
    if not committed:  # the working tree is HEAD's
        assert counts["plan_py"] == on_disk
    assert counts["own_elsewhere"] > 0 and 0 < counts["hooks"] < counts["package"]
