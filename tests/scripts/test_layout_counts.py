"""scripts/layout_counts.py's counts for issue 57, each on a small made-up checkout whose right answer
is known, so that a counter that counts wrong fails here; none depends on the real tree's numbers."""
import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("layout_counts", REPO / "scripts" / "layout_counts.py")
lc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lc)

TRAINER = '''
class Trainer:
    def __init__(self, cfg):
        """Stored here: cfg, step, a, b, sums."""
        self.cfg = cfg
        self.step: int = 0
        self.a, self.b = 1, 2
        self.sums = {}
        self.table[0] = cfg  # a read of table, stored into: not an attribute set
        print(self.only_read)

    def _run(self):
        """The loop."""
        total = 0
        # a comment, not code

        while self.step < 3:
            self.step += 1

            for i in range(2):  # nested, and smaller
                total += i
            self.sums["x"] = total  # a store into sums, no new attribute
            self.count += 1
        return total
'''

TRAINER_DELEGATING = '''
class Trainer:
    def _run(self):
        self.prepare()
        helper()
        return self._loop()

    def _loop(self):
        for i in range(3):
            x = i
            y = x
        return y

    def prepare(self):
        pass

    def bigger_but_not_called(self):
        while True:
            a = 1
            b = 2
            c = 3
            break
'''


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    """A fake checkout the script counts (its global ROOT)."""
    (tmp_path / "anyformer").mkdir()
    monkeypatch.setattr(lc, "ROOT", tmp_path)
    return tmp_path


def count(name: str) -> object:
    return lc.counts()[name]


def test_trainer_run_lines_loop_lines_file_lines_and_attributes(root):
    write(root, "anyformer/train/trainer.py", TRAINER)
    c = lc.counts()
    # total=0, while, self.step+=1, for, total+=i, self.sums[..]=, self.count+=1, return
    assert c["Trainer._run code lines"] == 8
    assert c["Trainer._run loop body code lines"] == 5  # the while's body, not the inner for's 1
    assert c["train/trainer.py lines"] == len(textwrap.dedent(TRAINER).splitlines())
    assert c["Trainer attributes"] == 6
    assert c["_Trainer attributes"] == ["a", "b", "cfg", "count", "step", "sums"]


def test_loop_in_a_method_run_calls_when_run_has_none(root):
    write(root, "anyformer/train/trainer.py", TRAINER_DELEGATING)
    c = lc.counts()
    assert c["Trainer._run code lines"] == 3
    assert c["Trainer._run loop body code lines"] == 2  # _loop's for; not the larger loop _run never calls


def test_trainer_counts_none_without_the_file_or_method(root):
    c = lc.counts()
    assert c["Trainer._run code lines"] is None and c["Trainer._run loop body code lines"] is None
    assert c["train/trainer.py lines"] is None and c["Trainer attributes"] is None
    write(root, "anyformer/train/trainer.py", "class Trainer:\n    def fit(self):\n        self.x = 1\n")
    c = lc.counts()
    assert c["Trainer._run code lines"] is None and c["Trainer._run loop body code lines"] is None
    assert c["Trainer attributes"] == 1 and c["train/trainer.py lines"] == 3


def test_attributes_read_by_checkpoint_save(root):
    write(root, "anyformer/train/checkpoint.py", '''
        def helper(x):
            return x.ignored

        def save(t: "Trainer", keep=2):
            if t.pending:
                t.sync()
            state = {"step": t.step, "sums": t.sums, "again": t.step}
            t.saved_step = keep  # a store, not a read
            return state, helper(t)
    ''')
    assert count("Trainer attributes read by checkpoint save") == 4
    assert lc.counts()["_Trainer attributes read by checkpoint save"] == ["pending", "step", "sums", "sync"]


def test_checkpoint_save_as_a_method_takes_the_trainer_parameter(root):
    write(root, "anyformer/train/checkpoint.py", '''
        class Saver:
            def save(self, path, trainer):
                return self.where, path.name, trainer.step, trainer.model
    ''')
    assert count("Trainer attributes read by checkpoint save") == 2


def test_checkpoint_save_none_when_missing(root):
    assert count("Trainer attributes read by checkpoint save") is None
    write(root, "anyformer/train/checkpoint.py", "def load(t):\n    return t.step\n")
    assert count("Trainer attributes read by checkpoint save") is None
    write(root, "anyformer/train/checkpoint.py", "def save(path):\n    return path.name\n")  # no trainer
    assert count("Trainer attributes read by checkpoint save") is None


def test_cache_zero(root):
    write(root, "anyformer/a.py", '''
        x = cache[0]
        y = self.cache[0] + cache[1] + cache[False] + other[0] + cache[0:1]
    ''')
    write(root, "anyformer/sub/b.py", "z = 'cache[0]'\n")  # a string is no subscript
    assert count("cache[0] occurrences") == 2


def test_last_only_tail(root):
    write(root, "anyformer/a.py", '''
        a = m(x, last_only=True)[:, -1]
        b = m(x, last_only=False)[:, -1]
        c = m(x)[:, -1]
        d = m(x, last_only=True)[:, 0]
        e = m(x, last_only=True)[0, -1]
        f = m(x, last_only=True)[:, -1, :]
        g = m(x, last_only=True)[1:, -1]
    ''')
    assert count("last_only=True)[:, -1] occurrences") == 1


def test_return_attention_and_forward_with_attention(root):
    write(root, "anyformer/models/m.py", '''
        def f(x, return_attention=False):                    # a parameter
            return g(x, return_attention=return_attention)   # a keyword and a name

        class A:
            def forward_with_attention(self, x):
                return self.return_attention                 # an attribute

            def other(self, *, return_attention: bool = True):   # a keyword-only parameter
                return "return_attention"                    # a string: not counted

        class B:
            def forward_with_attention(self, x):
                return x

        def forward_with_attention(x):                       # not a method
            return x
    ''')
    c = lc.counts()
    assert c["return_attention uses"] == 5
    assert c["forward_with_attention methods"] == 2
    assert c["_forward_with_attention methods"] == ["anyformer/models/m.py:A", "anyformer/models/m.py:B"]


def test_attention_layers_in_plan_with_their_own_forward(root):
    write(root, "anyformer/plan/layers.py", '''
        class Planned(MultiHeadAttention):         # its own forward: counted
            def forward(self, x):
                return x

        class Named(nn.MultiHeadAttention):        # an attribute base, its own forward: counted
            def forward(self, x):
                return x

        class Choice(MultiHeadAttention):          # no forward of its own
            kernel = "stock"

        class Other(nn.Linear):                    # not attention
            def forward(self, x):
                return x
    ''')
    write(root, "anyformer/nn/mine.py", '''
        class Outside(MultiHeadAttention):         # outside plan/: not counted
            def forward(self, x):
                return x
    ''')
    c = lc.counts()
    assert c["attention layers in plan/ with a forward of their own"] == 2
    assert c["_attention layers in plan/ with a forward of their own"] == ["anyformer/plan/layers.py:Planned",
                                                                        "anyformer/plan/layers.py:Named"]


def test_width_mod_heads_checks(root):
    write(root, "anyformer/nn/a.py", '''
        def f(width, heads, config, self):
            a = width % heads
            b = config.width % config.heads
            c = self.width // self.heads              # a division, not the check
            d = heads % width                         # the other way round
            return "width % heads"                    # a string
    ''')
    c = lc.counts()
    assert c["width % heads checks"] == 2
    assert c["_width % heads checks"] == ["anyformer/nn/a.py:3", "anyformer/nn/a.py:4"]


def test_files_writing_a_linear_layer_s_training_kernel(root):
    write(root, "anyformer/plan/layers.py", '''
        class Kernels:
            training_kernel = planned_training = "stock"   # class defaults: not counted

            def train_with(self, kernel):
                self.training_kernel = kernel
    ''')
    write(root, "anyformer/plan/prepare.py", '''
        def choose(m, kernel):
            m.planned_training = kernel
            other = m.training_kernel                      # a read: not counted
    ''')
    write(root, "anyformer/plan/reads.py", "def f(m):\n    return m.training_kernel\n")
    c = lc.counts()
    assert c["files writing a linear layer's training kernel"] == 2
    assert c["_files writing a linear layer's training kernel"] == ["anyformer/plan/layers.py",
                                                                    "anyformer/plan/prepare.py"]


def test_test_files_over_400_lines(root):
    assert count("test files over 400 lines") is None  # no tests/ folder
    write(root, "tests/test_long.py", "x = 1\n" * 401)
    write(root, "tests/sub/test_edge.py", "x = 1\n" * 400)
    write(root, "tests/notes.txt", "x\n" * 900)
    c = lc.counts()
    assert c["test files over 400 lines"] == 1
    assert c["_test files over 400 lines"] == ["tests/test_long.py: 401"]


def test_main_on_a_bare_checkout_prints_none_rather_than_crashing(root, monkeypatch, capsys):
    write(root, "anyformer/a.py", "x = 1\n")
    monkeypatch.setattr(sys, "argv", ["layout_counts.py", "--root", str(root), "--details"])
    lc.main()
    assert "| Trainer._run code lines | None |" in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["layout_counts.py", "--root", str(root), "--json"])
    lc.main()
    c = json.loads(capsys.readouterr().out)
    assert c["Trainer attributes read by checkpoint save"] is None and c["cache[0] occurrences"] == 0
