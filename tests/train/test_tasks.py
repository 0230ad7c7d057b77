"""Tasks own what differs between them; the trainer names none. A task registered from outside
the trainer trains, writes its own summary fields, metrics, lines and pictures."""
import inspect
import json

import pytest
import torch
import torch.nn.functional as F

from anyformer.train import RECIPES, TASKS, Task, Trainer, TrainConfig, recipe_config
from anyformer.train.tasks import ImageClassification, make_task

from .conftest import tiny_config


def protocol_members() -> set[str]:
    own = {n for n, v in vars(Task).items() if inspect.isfunction(v) and not n.startswith("_")}
    return own | set(Task.__annotations__)


def test_the_protocol_is_written_down_with_a_docstring_for_each_method():
    members = protocol_members()
    assert {"batch", "loss", "train_metrics", "evaluate", "summary_fields", "final_line", "draw", "flops_per_item",
            "unit", "items_per_example", "pictures", "family"} <= members
    for name, fn in vars(Task).items():
        if inspect.isfunction(fn) and not name.startswith("_"):
            assert fn.__doc__, f"Task.{name} says what it must do"


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_registered_task_has_every_member_of_the_protocol(name):
    cls = TASKS[name]
    instance_only = {"steps_per_epoch", "items_per_example"}  # set in __init__ (the language model's from seq_len)
    missing = sorted(m for m in protocol_members() - instance_only if not hasattr(cls, m))
    assert not missing, f"{cls.__name__} lacks {missing}"
    assert "info" in inspect.signature(cls.__init__).parameters


def test_the_registrys_own_list_of_pictures_is_what_its_tasks_draw():
    from anyformer.train.tasks import PICTURES, task_pictures
    builtin = {p for name in TASKS for p in TASKS[name].pictures}
    assert builtin == set(PICTURES) and set(task_pictures()) == builtin


def test_every_recipe_names_a_registered_task():
    for name, recipe in RECIPES.items():
        assert recipe["task"] in TASKS, name
        assert recipe_config(name).task == recipe["task"]


def test_an_unknown_task_is_named_with_the_known_ones(tmp_path):
    cfg = TrainConfig(task="paint", out=str(tmp_path), max_steps=1)
    # Every registered task is listed, sorted (classify, flow, lm, mae and any a later change adds).
    with pytest.raises(ValueError, match=r"unknown task 'paint'; expected one of \[.*'classify'.*'lm'.*\]"):
        make_task(cfg, torch.device("cpu"))
    with pytest.raises(ValueError, match=r"unknown task 'paint'"):
        Trainer(cfg)


class EvenOdd(ImageClassification):
    """Is the digit even? A new task written outside the trainer, with its own stats, metric,
    words and picture."""

    pictures = ("parity.txt",)

    def model_overrides(self):
        return {**super().model_overrides(), "num_classes": 2}

    def loss(self, model, batch):
        x, y = batch
        logits = model(x)
        odd = y % 2
        return F.cross_entropy(logits.float(), odd), {"odd_right": ((logits.argmax(-1) == odd) & (odd == 1)).sum(),
                                                       "odd": odd.sum()}

    def train_metrics(self, sums):
        return {"odd_recall": sums["odd_right"] / max(1, sums["odd"])}

    def progress_fields(self, sums):
        return {}

    @torch.no_grad()
    def evaluate(self, model, dist):
        x, y = self.normalise(self.test.images), self.test.labels % 2
        logits = model(x)
        return {"eval_loss": float(F.cross_entropy(logits, y)),
                "parity_accuracy": float((logits.argmax(-1) == y).float().mean())}

    def eval_text(self, line):
        return f"parity {line['parity_accuracy']:.3f}"

    def summary_fields(self, line, history):
        return {"parity_accuracy": line["parity_accuracy"], "evaluations": len(history)}

    def final_line(self, summary):
        return f"parity accuracy {summary['parity_accuracy']:.3f}"

    def draw(self, model, result, run_dir):
        (run_dir / "parity.txt").write_text(f"{result['parity_accuracy']}\n")


@pytest.mark.slow
def test_a_new_task_trains_without_touching_the_trainer(tmp_path, mnist_slice, monkeypatch, capsys):
    monkeypatch.setitem(TASKS, "even-odd", EvenOdd)
    train, test = mnist_slice
    cfg = tiny_config(tmp_path, task="even-odd", max_steps=12, eval_every=6, plots=True)
    monkeypatch.setattr("anyformer.train.classify.load_image_dataset",
                        lambda data, split: train if split == "train" else test)
    trainer = Trainer(cfg)  # made through the registry, like `anyformer train`
    assert isinstance(trainer.task, EvenOdd) and trainer.model.config.num_classes == 2
    summary = trainer.run()
    run = tmp_path / "run"
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [6, 12]
    assert all(0 <= m["odd_recall"] <= 1 and "train_accuracy" not in m and "parity_accuracy" in m for m in lines)
    assert summary["parity_accuracy"] == lines[-1]["parity_accuracy"] and summary["evaluations"] == 2
    assert "test_accuracy" not in summary and "val_loss" not in summary
    assert (run / "parity.txt").read_text() == f"{lines[-1]['parity_accuracy']}\n"
    assert not (run / "confusion.png").exists(), "the pictures are the task's own"
    out = capsys.readouterr().out
    assert "step 12 | epoch" in out and f"| parity {lines[-1]['parity_accuracy']:.3f} |" in out
    assert trainer.task.final_line(summary).startswith("parity accuracy ")
    # A fresh run over the same directory removes the pictures of every registered task.
    make = Trainer(tiny_config(tmp_path, max_steps=1, overwrite=True, plots=True))
    (run / "parity.txt").write_text("stale")
    make.run()
    assert not (run / "parity.txt").exists() and (run / "confusion.png").exists()


@pytest.mark.slow
def test_throughput_counts_each_tasks_items(tmp_path, mnist_slice):
    """Images for a classifier; for a language model seq_len tokens per example (test_lm covers it)."""
    train, test = mnist_slice
    task = ImageClassification(tiny_config(tmp_path), torch.device("cpu"), train, test)
    assert (task.unit, task.items_per_example) == ("images", 1)
    trainer = Trainer(tiny_config(tmp_path, max_steps=3), task=task)
    trainer.run()
    assert trainer.last_line["images_per_s"] > 0
    assert trainer.task.flops_per_item(trainer.model) > 2 * trainer.model.num_params()
