"""What the option-pinning tests (test_every_option_*.py) share: a tiny run on 320 training
digits, and what a run directory holds (the steps evaluated, the checkpoints kept)."""
from __future__ import annotations

import json
from pathlib import Path

from anyformer.train import TrainConfig

from .conftest import tiny_config


def short(tmp_path, **kw) -> TrainConfig:
    """tiny_config on 320 training digits (10 steps an epoch) and 100 test digits."""
    return tiny_config(tmp_path, **{"limit_train": 320, "limit_eval": 100, "warmup_steps": 0, **kw})


def metric_steps(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").glob("*.pt"))
