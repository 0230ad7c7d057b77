"""The baseline beside a series classifier (`--baseline`): aeon's MiniRocket (Dempster et al. 2021),
the usual first try on labelled series, fitted on exactly the run's training series and scored on
exactly the series the run was scored on.

MiniRocket needs series of one length: the run's series are zero-padded past their ends (as the run
stores them) to the longest of either split, and to MiniRocket's shortest (9 steps)."""
from __future__ import annotations

import time
from typing import Any

import numpy as np

MIN_LENGTH = 9  # MiniRocket's kernels are 9 steps long


def padded(values: Any, length: int) -> np.ndarray:
    """float32 (N, C, T) zero past each series' end -> float64 (N, C, length)."""
    x = values.double().numpy()
    out = np.zeros((*x.shape[:2], length))
    out[:, :, : x.shape[2]] = x[:, :, :length]
    return out


def fit_minirocket(task: Any, threads: int | None) -> dict[str, Any]:
    import aeon
    from aeon.classification.convolution_based import MiniRocketClassifier
    length = max(MIN_LENGTH, task.train.values.shape[2], task.test.values.shape[2])
    started = time.perf_counter()
    model = MiniRocketClassifier(random_state=task.cfg.seed, n_jobs=threads or 1)
    model.fit(padded(task.train.values, length), task.train.labels.numpy())
    predicted = model.predict(padded(task.test.values, length))
    prefix = "test" if task.eval_split == "test" else "val"
    return {"method": f"MiniRocket (aeon {aeon.__version__}), its defaults",
            f"{prefix}_accuracy": float((np.asarray(predicted) == task.test.labels.numpy()).mean()),
            "seconds": round(time.perf_counter() - started, 3)}
