"""The model-wide linear decision: faked timings pick and the choice is applied, a gain within the
margin keeps F.linear, a candidate that disagrees is dropped, forcing wins, a short run measures
nothing, and real training steps are timed with each kernel on real planned layers."""
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from anyformer import plan
from anyformer.plan import prepare, set_training_kernel
from anyformer.plan.layers import PlannedLinear
from anyformer.plan import linears_for_training

FIELDS = {"model": "tiny", "batch": "8x6", "amp": "none", "device": "cpu"}
needs_onednn = pytest.mark.skipif(plan.onednn_linear_op() is None, reason="this torch build has no oneDNN")


class Tiny(nn.Module):
    """Two linear layers; `kernel` is what set_kernel last applied, and `wrong_for` a kernel whose
    outputs come out doubled (a kernel that disagrees)."""

    def __init__(self, wrong_for: str | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 3))
        self.kernel: str | None = None
        self.applied: list[str | None] = []
        self.wrong_for = wrong_for

    def set_kernel(self, kernel: str | None) -> None:
        self.kernel = kernel
        self.applied.append(kernel)

    def forward(self, x):
        out = self.net(x)
        return out * 2 if self.kernel is not None and self.kernel == self.wrong_for else out


def _loss(model):
    x, y = torch.randn(8, 6, generator=torch.Generator().manual_seed(1)), torch.arange(8) % 3
    return lambda m: F.cross_entropy(m(x), y)


def _entry(plan_cache):
    data = json.loads(next(plan_cache.glob("*.json")).read_text())["decisions"]
    return next(v for k, v in data.items() if k.startswith("linears "))


CHOICES = ("stock", "per-shape", "onednn", "mixed")


@pytest.mark.parametrize("winner", CHOICES)
def test_faked_timing_table_picks_its_favourite_and_applies_it(planner_with, plan_cache, winner, monkeypatch):
    monkeypatch.setattr(plan.linears, "onednn_linear_op", lambda: object())  # as on a build with oneDNN
    planner_with({n: 0.5 if n == winner else 1.0 for n in CHOICES})
    model = Tiny()
    assert linears_for_training(model, model.set_kernel, _loss(model), fields=FIELDS).choice == winner
    assert model.applied[-1] == (None if winner == "per-shape" else winner)
    entry = _entry(plan_cache)
    assert entry["choice"] == winner and entry["timed"] == "forward+backward"
    again = linears_for_training(model, model.set_kernel, _loss(model), fields=FIELDS)  # from the record
    assert again.choice == winner and again.why.startswith("recorded for the whole step: stock ")


def test_a_gain_within_the_margin_keeps_f_linear(planner_with, monkeypatch):
    monkeypatch.setattr(plan.linears, "onednn_linear_op", lambda: object())
    planner_with({"stock": 1.0, "per-shape": 0.99, "onednn": 0.97, "mixed": 0.98})  # under the 5% margin
    model = Tiny()
    assert linears_for_training(model, model.set_kernel, _loss(model), fields=FIELDS).choice == "stock"
    assert model.kernel == "stock"


def test_a_kernel_that_disagrees_is_dropped(planner_with, plan_cache, monkeypatch):
    monkeypatch.setattr(plan.linears, "onednn_linear_op", lambda: object())
    planner_with({"stock": 1.0, "per-shape": 1.0, "onednn": 0.1, "mixed": 0.5})
    model = Tiny(wrong_for="onednn")
    assert linears_for_training(model, model.set_kernel, _loss(model), fields=FIELDS).choice == "mixed"
    assert "differs from stock" in _entry(plan_cache)["dropped"]["onednn"]


@pytest.mark.parametrize("spec, expected, applied", [("linears=onednn", "onednn", "onednn"),
                                                     ("linear=stock", "per-shape", None), ("stock", "per-shape", None),
                                                     ("stock,linear=onednn", "per-shape", None),
                                                     ("stock,linears=mixed", "mixed", "mixed")])
def test_the_forced_setting_wins(planner_with, monkeypatch, spec, expected, applied):
    monkeypatch.setattr(plan.linears, "onednn_linear_op", lambda: object())
    p = planner_with({"stock": 1.0, "per-shape": 1.0, "onednn": 0.1, "mixed": 0.1})
    monkeypatch.setenv("ANYFORMER_PLAN", spec)
    model = Tiny()
    assert linears_for_training(model, model.set_kernel, _loss(model), fields=FIELDS).choice == expected
    assert model.applied == [applied] and p.timer.calls == []


def test_too_short_a_run_is_not_measured_but_a_record_still_applies(planner_with, monkeypatch):
    monkeypatch.setattr(plan.linears, "onednn_linear_op", lambda: object())
    p = planner_with({"stock": 1.0, "per-shape": 1.0, "onednn": 0.5, "mixed": 0.8})
    model = Tiny()
    assert linears_for_training(model, model.set_kernel, _loss(model), fields=FIELDS, steps=20).choice == "per-shape"
    assert p.timer.calls == [] and model.applied == [None]
    assert linears_for_training(model, model.set_kernel, _loss(model), fields=FIELDS, steps=1000).choice == "onednn"
    planner_with({})  # another process: reads that record, times nothing
    assert linears_for_training(model, model.set_kernel, _loss(model), fields=FIELDS, steps=20).choice == "onednn"
    assert model.applied[-1] == "onednn"


def test_nothing_to_choose_without_onednn(planner_with, monkeypatch):
    monkeypatch.setattr(plan.linears, "onednn_linear_op", lambda: None)
    p = planner_with({"stock": 1.0, "per-shape": 1.0, "onednn": 0.1, "mixed": 0.1})
    model = Tiny()
    assert linears_for_training(model, model.set_kernel, _loss(model), fields=FIELDS).choice == "per-shape"
    assert p.timer.calls == []


@needs_onednn
def test_the_step_is_timed_with_each_kernel_on_planned_layers_and_nothing_moves(planner_with, plan_cache):
    """The timed calls are the step's forward and backward (never the run's own steps): the global RNG,
    the gradients and the weights are as they were, and the choice is applied to every layer."""
    p = planner_with()  # a real timer, which runs what it times
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Dropout(0.2), nn.Linear(16, 3))
    loss = _loss(model)
    prepare(model, loss)  # the layers' own (per-shape) decisions
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(7)
    rng = torch.get_rng_state()
    chosen = linears_for_training(model, lambda k: set_training_kernel(model, k), loss, fields=FIELDS).choice
    assert torch.equal(torch.get_rng_state(), rng)  # the checks' dropout drew from a fork
    assert all(q.grad is None for q in model.parameters())
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())
    assert chosen in CHOICES and _entry(plan_cache)["timed"] == "forward+backward"
    planned = {m.planned_training for m in model if isinstance(m, PlannedLinear)}
    assert {m.training_kernel for m in model if isinstance(m, PlannedLinear)} == (planned if chosen == "per-shape" else {chosen})


@needs_onednn
@pytest.mark.parametrize("winner", ["onednn", "per-shape"])
def test_what_the_candidates_are_answered_is_not_the_runs_plan(planner_with, winner):
    """The layers' own answers are asked when the model is prepared, whichever candidate then wins,
    and the candidates' timing asks nothing more: a run that measured and a run that read the record
    write the same plan.json."""
    p = planner_with({n: 0.5 if n == winner else 1.0 for n in CHOICES})
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 3))
    per_shape = lambda answers: sorted(k for k in answers if k.startswith("linear ") and "training=1" in k)
    with p.recording() as answers:
        prepare(model, _loss(model))
        asked = per_shape(answers)
        chosen = linears_for_training(model, lambda k: set_training_kernel(model, k), _loss(model), fields=FIELDS)
        assert chosen.choice == winner and per_shape(answers) == asked
        _loss(model)(model).backward()  # the run's first step asks nothing
    assert len(asked) == 2 and per_shape(answers) == asked


def test_the_per_shape_choice_still_reads_under_its_old_name(planner_with):
    """The choice named "planned" before is "per-shape": a spec and a recorded plan's answer that say
    "planned" still mean it (the run's plan.json `linears`: test_plan_replay.py)."""
    from anyformer.plan import choices
    assert choices.parse("linears=planned") == {"linears": "per-shape"}
    assert choices.decision("linears").canonical("planned") == "per-shape"
    assert choices.decision("linears").canonical("onednn") == "onednn"
    # A recorded answer under an old name, replayed by `recording`, on a decision with a renamed choice.
    choices.register(choices.Decision("renamed-demo", ("stock", "new"), renamed=(("old", "new"),)))
    try:
        p = planner_with({"stock": 1.0, "new": 2.0})  # measured now, "new" would lose
        key = plan.store.entry_key("renamed-demo", {"n": 1})
        with p.recording({key: "old"}):
            got = p.decide("renamed-demo", {"n": 1}, lambda: {"stock": lambda: torch.ones(1), "new": lambda: torch.ones(1)})
        assert got == "new"
    finally:
        choices.unregister("renamed-demo")
