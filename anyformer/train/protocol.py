"""The Task protocol: everything that differs between what is learned (classification, language
modelling, and next generation and masked autoencoding), so that the trainer names no task.

The trainer owns the loop: learning rate, chunks and gradient accumulation, the optimiser,
distribution, checkpoints, the run directory, timing. A task owns its data and its meaning:

- batches: a tuple of tensors whose first dimension counts examples (the trainer splits every
  tensor of it alike into accumulation chunks), and the size of the step's global batch;
- the loss, and per-step *stats*: numbers that add up across chunks, ranks and steps (e.g. correct
  and count), turned into train metrics only once summed, so that a mean is never averaged;
- evaluation: numbers (written to metrics.jsonl) and anything else its pictures need;
- the words and files of a run: the printed evaluation text, the final line of `anyformer train`,
  progress-bar fields, summary.json fields, and the pictures it draws;
- throughput: the unit counted (images, tokens), items per example, and training FLOPs per item.

A new task is a class with these members, registered in `tasks.TASKS`. Its constructor takes
`(cfg, device, *, info=None)`: `info` is the "data" section of a finished run's config.json (what
`run_info` returned), given when a run is evaluated again, so that it is scored exactly as trained.
Where `cfg.data` then differs from the data the run recorded (`info["dataset"]`: `anyformer eval RUN
--data PATH`), the task scores that other data instead, in the same format: its test split where it
has one, else all of it, with the run's classes, tokenizer and preprocessing; a class the run does
not know is refused in one line.

Optional: a task with a method `run_files() -> dict[str, bytes]` has those files written into the run
directory when the run starts (a tokenizer learned from the corpus, which the run needs to be used).

Optional: a task with a method `fit_model(model) -> None` has it called once the model is built, before
its weights may be loaded from elsewhere: parts of a model fitted to the training data rather than
learned (the series kernel stem's biases and feature statistics), saved with its weights.

Optional: a task with a class attribute `draw_each_evaluation = True` has `draw` called after every
evaluation too (a generator's samples.png shows each evaluation's samples), not only at the end.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Protocol

from torch import Tensor, nn

Batch = tuple[Tensor, ...]


class Task(Protocol):
    family: ClassVar[str]
    """The model family it trains ("vit", "gpt"); the trainer refuses a preset of another."""
    unit: ClassVar[str]
    """What throughput counts: "images", "tokens". Names the `<unit>_per_s` metric."""
    pictures: ClassVar[tuple[str, ...]]
    """File names `draw` writes into the run directory (cleared when a fresh run starts)."""
    steps_per_epoch: int
    items_per_example: int
    """Units in one example of a batch: 1 image, or seq_len tokens."""

    def model_overrides(self) -> dict[str, Any]:
        """Model config fields the data fixes (classes, channels, image size, vocabulary)."""

    def batch(self, step: int, rank: int = 0, world: int = 1) -> tuple[Batch, int]:
        """This rank's contiguous share of step `step`'s global batch, and that global batch's size.
        A function of (seed, step) alone: a resumed run draws exactly the same."""

    def loss(self, model: nn.Module, batch: Batch) -> tuple[Tensor, dict[str, Any]]:
        """The mean loss over `batch` (a scalar tensor, kept on the device) and its stats: sums
        (tensors or numbers) that the trainer adds over chunks, ranks and steps."""

    def train_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        """Metrics made from the summed stats since the last evaluation, e.g. train_accuracy."""

    def progress_fields(self, sums: dict[str, float]) -> dict[str, str]:
        """Extra fields of the progress bar, from the same sums."""

    def evaluate(self, model: nn.Module, dist: Any) -> dict[str, Any]:
        """Score the model on held-out data, each rank its shard, sums added with `dist.sum`.
        Numbers go into metrics.jsonl; other values (a confusion matrix) are for `draw`."""

    def eval_text(self, line: dict[str, Any]) -> str:
        """The evaluation's part of the printed line, from a metrics line."""

    def summary_fields(self, line: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
        """summary.json's task fields, from the last metrics line and all of metrics.jsonl."""

    def final_line(self, summary: dict[str, Any]) -> str:
        """What `anyformer train` prints when the run ends."""

    def draw(self, model: nn.Module, result: dict[str, Any], run_dir: Path) -> None:
        """Write `pictures` into run_dir, from the last evaluation's result (rank 0 only)."""

    def flops_per_item(self, model: nn.Module) -> float:
        """Training FLOPs (forward and backward) per item of `unit`."""

    def run_info(self) -> dict[str, Any]:
        """The data's description, saved as config.json's "data" (and given back as `info`)."""


def scores_other_data(data: str, info: dict[str, Any] | None) -> bool:
    """Whether a finished run (`info`, its data section) is to be scored on other data than its own:
    `data` names neither what it recorded as its dataset nor the same path spelt otherwise. A run
    that recorded no dataset is scored on its own."""
    recorded = (info or {}).get("dataset")
    if info is None or recorded is None or str(data) == str(recorded):
        return False
    a, b = Path(str(data)).expanduser(), Path(str(recorded)).expanduser()
    return not (a.exists() and b.exists() and a.resolve() == b.resolve())
