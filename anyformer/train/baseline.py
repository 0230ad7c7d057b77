"""A baseline beside a run (`anyformer train --baseline`): the classical method a practitioner would
try first, fitted on exactly the run's training examples (a table's rows held back to choose its
weights by included) and scored on exactly the examples the run was scored on, so that a user sees
whether the transformer earned its cost. Images: baseline_pixels.py; series: baseline_series.py.

Labelled text: TF-IDF of word 1- and 2-grams (sublinear term frequencies) and a logistic regression,
scikit-learn's usual first try on text, on the run's own training texts and scored texts.

Tables: LightGBM with its library defaults (the usual first try on a table; Grinsztajn et al. 2022
found tree ensembles hard to beat on tables of this size), fed the run's own encoding: numbers with
NaN where missing (trees split on order, which the quantile map keeps), categories as LightGBM's
categorical features (missing as missing, an unseen value as its own code).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

__all__ = ["fit_baseline", "require_baseline"]

# Each task's baseline: (its name, the modules it imports, the extra that installs them).
METHODS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "table": ("LightGBM", ("lightgbm", "sklearn"), "baseline"),
    "classify": ("logistic regression on the pixels", ("sklearn",), "baseline"),
    "series": ("MiniRocket", ("aeon",), "series"),
    "text-classify": ("TF-IDF + logistic regression", ("sklearn",), "text"),
}


def require_baseline(task: str = "table") -> None:
    """An ImportError in one line, naming the extra, where the baseline's libraries are missing (and a
    ValueError where the task has none): asked before a run starts, so that nobody waits for a run to
    learn its baseline cannot be fitted."""
    if task not in METHODS:
        raise ValueError(f"--baseline is built for tables, image classes, series and labelled text; this run's "
                         f"task is {task}")
    method, modules, extra = METHODS[task]
    for name in modules:
        try:
            __import__(name)
        except ImportError:
            raise ImportError(f"--baseline fits {method}, which needs {name.replace('sklearn', 'scikit-learn')}: "
                              f"pip install 'anyformer[{extra}]'") from None


def fit_baseline(task: Any, threads: int | None = None) -> dict[str, Any]:
    """{"method", figures named as the run's summary names them, "seconds"} for the run's task; an
    ImportError naming the extra where the baseline's library is missing."""
    from .tables import TableTask
    kind = task.cfg.task
    require_baseline(kind)
    try:
        if isinstance(task, TableTask):
            return _lightgbm(task, threads)
        if kind == "text-classify":
            return tfidf_logistic(task)
        if kind == "series":
            from .baseline_series import fit_minirocket
            return fit_minirocket(task, threads)
        from .baseline_pixels import fit_pixels
        return fit_pixels(task, threads)
    except (ImportError, ValueError):
        raise
    except Exception as e:  # noqa: BLE001 - the library's own errors, said in one line: the run is saved already
        raise ValueError(f"--baseline: {METHODS[kind][0]} failed on this run's data ({type(e).__name__}: "
                         f"{str(e).splitlines()[0][:200] if str(e) else ''}); the run itself is complete") from None


def _features(rows) -> np.ndarray:
    numbers = rows.numbers.numpy().astype(np.float64)
    categories = rows.categories.numpy().astype(np.float64)
    categories[categories == 0] = np.nan  # the missing row of the lookup table is LightGBM's missing value
    return np.concatenate([numbers, categories], axis=1)


def _lightgbm(task: Any, threads: int | None) -> dict[str, Any]:
    import lightgbm
    # Every training row, the ones the run held back to choose its weights by too: the method a
    # practitioner tries first would be fitted on them all.
    fitted = [task.train] + ([task.select] if task.select is not None else [])
    train_x, train_y = np.concatenate([_features(r) for r in fitted]), np.concatenate([r.target.numpy() for r in fitted])
    test_x = _features(task.test)
    cats = list(range(task.train.numbers.shape[1], train_x.shape[1]))
    options = dict(verbose=-1, random_state=task.cfg.seed, n_jobs=threads or 0)
    started = time.perf_counter()
    prefix = "test" if task.eval_split == "test" else "val"
    if task.regress:
        model = lightgbm.LGBMRegressor(**options)
        model.fit(train_x, train_y, categorical_feature=cats)
        import torch
        pred = task.encoding.target_units(torch.from_numpy(model.predict(test_x))).numpy()
        truth = task.encoding.target_units(task.test.target).numpy()
        err = pred - truth
        total = float(((truth - truth.mean()) ** 2).sum())
        figures = {f"{prefix}_r2": 1 - float((err ** 2).sum()) / total if total > 0 else float("nan"),
                   f"{prefix}_rmse": float(np.sqrt((err ** 2).mean())), f"{prefix}_mae": float(np.abs(err).mean())}
    else:
        model = lightgbm.LGBMClassifier(**options)
        model.fit(train_x, train_y, categorical_feature=cats)
        figures = {f"{prefix}_accuracy": float((model.predict(test_x) == task.test.target.numpy()).mean())}
    return {"method": f"LightGBM {lightgbm.__version__}, library defaults", **figures,
            "seconds": round(time.perf_counter() - started, 3)}


def tfidf_logistic(task: Any) -> dict[str, Any]:
    """TF-IDF (word 1-2 grams, sublinear tf) + logistic regression on the run's training texts, scored on
    the texts the run scored: accuracy and macro-F1, named as the run's summary names them."""
    import sklearn
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score
    s = task.splits
    started = time.perf_counter()
    vectors = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
    model = LogisticRegression(max_iter=2000, C=10.0)
    model.fit(vectors.fit_transform(s.train.texts), s.train.labels)
    predicted = model.predict(vectors.transform(s.test.texts))
    truth = np.array(s.test.labels)
    prefix = "test" if task.eval_split == "test" else "val"
    return {"method": f"TF-IDF (word 1-2 grams) + logistic regression (C=10), scikit-learn {sklearn.__version__}",
            f"{prefix}_accuracy": float((predicted == truth).mean()),
            f"{prefix}_macro_f1": float(f1_score(truth, predicted, average="macro")),
            "seconds": round(time.perf_counter() - started, 3)}
