"""The compile decision: faked timings pick, the compile time is counted against the run, a compiled
step that disagrees or raises is dropped, forcing wins, real steps are timed, and one real
torch.compile end to end."""
import json
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from anyformer import plan
from anyformer.plan import compiled as compiled_module
from anyformer.plan import compile_for_decode, compile_for_inference, compile_for_training

FIELDS = {"model": "tiny", "batch": "8x6", "amp": "none"}


class FakeCompiled(nn.Module):
    """What the tests hand back for torch.compile: the same module, off by `offset`, or raising."""

    def __init__(self, inner: nn.Module, offset: float = 0.0, raises: bool = False) -> None:
        super().__init__()
        self.inner, self.offset, self.raises = inner, offset, raises

    def forward(self, x):
        if self.raises:
            raise RuntimeError("inductor: no C++ compiler found")
        return self.inner(x) * (1.0 + self.offset)


@pytest.fixture
def fake_compile(monkeypatch):
    def use(offset=0.0, raises=False):
        monkeypatch.setattr(compiled_module, "_compile", lambda m: FakeCompiled(m, offset, raises))
    use()
    return use


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Dropout(0.1), nn.Linear(16, 3))
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    loss = lambda m: F.cross_entropy(m(x), y)  # noqa: E731
    loss.x = x
    return model, loss


def _entry(plan_cache):
    data = json.loads(next(plan_cache.glob("*.json")).read_text())["decisions"]
    return next(v for k, v in data.items() if k.startswith("compile "))


@pytest.mark.parametrize("compiled_s, why", [
    (0.97, "compiled not faster by the plan's 5% margin: eager 1000 ms, compiled 970 ms"),
    (1.2, "eager measured faster: eager 1000 ms, compiled 1200 ms")])
def test_why_eager_says_whether_it_was_faster(planner_with, plan_cache, fake_compile, tiny, compiled_s, why):
    # compiled 3% faster stays out under the compile decision's 5% margin: the reason must not say eager was faster
    planner_with({"eager": 1.0, "compiled": compiled_s})
    model, loss = tiny
    chosen = compile_for_training(model, loss, fields=FIELDS)
    assert chosen.choice == "eager" and chosen.why.startswith(why)


@pytest.mark.parametrize("winner", ["eager", "compiled"])
def test_faked_timing_table_picks_its_favourite(planner_with, plan_cache, fake_compile, tiny, winner):
    planner_with({"eager": 0.5 if winner == "eager" else 1.0, "compiled": 0.5 if winner == "compiled" else 1.0})
    model, loss = tiny
    chosen = compile_for_training(model, loss, fields=FIELDS)
    assert chosen.choice == winner
    assert isinstance(chosen.module, FakeCompiled) == (winner == "compiled")
    entry = _entry(plan_cache)
    assert entry["choice"] == winner and entry["compile_s"] >= 0 and entry["timed"] == "forward+backward"


@pytest.mark.parametrize("forced, expected", [("compiled", "compiled"), ("eager", "eager"), ("graphs", "eager")])
def test_forcing_is_followed_and_cuda_graphs_fall_back_to_eager_on_the_cpu(planner_with, fake_compile, tiny,
                                                                          forced, expected):
    p = planner_with({})
    with p.forcing(compile=forced):
        chosen = compile_for_training(*tiny, fields=FIELDS, steps=10**6)
    assert chosen.choice == expected and p.measured == []
    assert chosen.why == ("compile=graphs cannot run here (CUDA graphs need CUDA); eager" if forced == "graphs"
                          else f"compile={forced} is forced")


def test_a_gain_within_the_margin_stays_eager(planner_with, fake_compile, tiny):
    planner_with({"eager": 1.0, "compiled": 0.97})  # 3% faster: under the compile decision's 5% margin
    assert compile_for_training(*tiny, fields=FIELDS).choice == "eager"


def test_the_compile_time_is_counted_against_the_run(planner_with, fake_compile, tiny):
    p = planner_with({"eager": 1.0, "compiled": 0.5})
    runs = {"eager": lambda: torch.ones(1), "compiled": lambda: torch.ones(1)}
    p.decide("compile", FIELDS, lambda: runs, extra=lambda: {"compile_s": 100.0})  # as an earlier process left it
    planner_with({})  # this process: reads that record, measures nothing, and has its compile still to pay
    short = compile_for_training(*tiny, fields=FIELDS, steps=50)  # saves 25 s: less than 100 s of compiling
    assert short.choice == "eager" and "less than its ~100 s compile" in short.why
    assert compile_for_training(*tiny, fields=FIELDS, steps=1000).choice == "compiled"  # saves 500 s


def test_a_time_budget_pays_the_compile_out_of_itself(planner_with, plan_cache, fake_compile, tiny):
    """Under a time budget, a compile costs steps: with no record, a budget that 10% of could not repay
    the estimated compile (60 s before any) is not measured; a record is judged by the steps the budget
    holds, B (1 - t_compiled / t_eager) against the compile."""
    p = planner_with({"eager": 1.0, "compiled": 0.8})
    short = compile_for_training(*tiny, fields=FIELDS, steps=10**6, seconds=540.0)
    assert short.choice == "eager" and "540 s time budget is too short" in short.why and p.timer.calls == []
    assert compile_for_training(*tiny, fields=FIELDS, steps=10**6, seconds=900.0).choice == "compiled"
    runs = {"eager": lambda: torch.ones(1), "compiled": lambda: torch.ones(1)}
    p.decide("compile", {**FIELDS, "batch": "4x6"}, lambda: runs, extra=lambda: {"compile_s": 100.0})
    planner_with({})  # a later process: 20% faster saves 0.2 s a step, 0.2 B over a budget of B seconds
    fields = {**FIELDS, "batch": "4x6"}
    assert compile_for_training(*tiny, fields=fields, steps=10**6, seconds=400.0).choice == "eager"  # 80 s < 100 s
    assert compile_for_training(*tiny, fields=fields, steps=10**6, seconds=600.0).choice == "compiled"  # 120 s
    assert compile_for_training(*tiny, fields=fields, steps=100, seconds=600.0).choice == "eager"  # 100 steps: 20 s


def test_too_short_a_run_is_not_measured(planner_with, plan_cache, fake_compile, tiny):
    p = planner_with({"eager": 1.0, "compiled": 0.1})
    chosen = compile_for_training(*tiny, fields=FIELDS, steps=3)
    assert chosen.choice == "eager" and "too few to repay a compile" in chosen.why
    assert p.timer.calls == [] and not list(plan_cache.glob("*.json"))


def test_one_slow_call_does_not_make_a_run_look_long_enough_to_measure(planner_with, plan_cache, fake_compile,
                                                                       tiny):
    """The eager step is timed as the fastest of a few calls: one call slowed by the host (here the first
    timed one sleeps 0.5 s) would make 1,000 steps look like 500 s, over 8 compiles of 60 s."""
    p = planner_with({"eager": 1.0, "compiled": 0.1})
    model, loss = tiny
    calls = []

    def jittery(m):
        calls.append(1)
        if len(calls) == 2:  # the first is the warm-up pass; the second is the first one timed
            time.sleep(0.5)
        return loss(m)
    chosen = compile_for_training(model, jittery, fields=FIELDS, steps=1000)
    assert chosen.choice == "eager" and "too few to repay a compile" in chosen.why
    assert p.timer.calls == [] and len(calls) == 4


def test_a_compiled_step_that_disagrees_is_dropped(planner_with, plan_cache, fake_compile, tiny):
    planner_with({"eager": 1.0, "compiled": 0.1})
    fake_compile(offset=1.0)  # doubles the logits: the loss and gradients differ
    chosen = compile_for_training(*tiny, fields=FIELDS)
    assert chosen.choice == "eager" and "differs from eager" in _entry(plan_cache)["dropped"]["compiled"]


def test_a_compile_that_raises_is_dropped(planner_with, plan_cache, fake_compile, tiny):
    planner_with({"eager": 1.0, "compiled": 0.1})
    fake_compile(raises=True)
    assert compile_for_training(*tiny, fields=FIELDS).choice == "eager"
    assert "no C++ compiler" in _entry(plan_cache)["dropped"]["compiled"]


@pytest.mark.parametrize("forced", ["eager", "compiled"])
def test_the_forced_setting_wins(planner_with, fake_compile, tiny, monkeypatch, forced):
    p = planner_with({"eager": 1.0, "compiled": 0.1} if forced == "eager" else {"eager": 0.1, "compiled": 1.0})
    monkeypatch.setenv("ANYFORMER_PLAN", f"compile={forced}")
    chosen = compile_for_training(*tiny, fields=FIELDS, steps=10**6)
    assert chosen.choice == forced and "forced" in chosen.why and p.timer.calls == []


@pytest.mark.parametrize("how", ["forced", "cached"])
def test_an_eager_pass_comes_before_the_compiled_module(planner_with, fake_compile, tiny, monkeypatch, how):
    """The model's own kernel decisions (and each attention layer's answer, which its compiled graph
    follows) are made by an eager pass outside any measurement, also when nothing is measured."""
    p = planner_with({"eager": 1.0, "compiled": 0.1})
    model, loss = tiny
    if how == "forced":
        monkeypatch.setenv("ANYFORMER_PLAN", "compile=compiled")
    else:
        runs = {"eager": lambda: torch.ones(1), "compiled": lambda: torch.ones(1)}
        p.decide("compile", FIELDS, lambda: runs, extra=lambda: {"compile_s": 1.0})
        planner_with({"eager": 1.0, "compiled": 0.1})
    seen = []
    model.register_forward_hook(lambda m, i, o: seen.append(torch.compiler.is_compiling()))
    chosen = compile_for_training(model, loss, fields=FIELDS, steps=1000)
    assert chosen.choice == "compiled" and seen == [False]


def test_the_check_and_the_timing_leave_rng_gradients_and_weights_alone(planner_with, plan_cache, fake_compile, tiny):
    """The timed calls are the step's forward and backward, never the run's own steps: nothing the
    run computes with moves while the plan measures."""
    planner_with()  # a real timer, which runs what it times
    model, loss = tiny
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(7)
    rng = torch.get_rng_state()
    chosen = compile_for_training(model, loss, fields=FIELDS)
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(q.grad is None for q in model.parameters())
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())
    assert chosen.choice in ("eager", "compiled") and _entry(plan_cache)["timed"] == "forward+backward"


@pytest.mark.slow
def test_a_real_compile_end_to_end(planner_with, plan_cache, tiny):
    """torch.compile for real (inductor, the C++ compiler): it agrees with eager and its time is on record."""
    planner_with()
    model, loss = tiny
    chosen = compile_for_training(model, loss, fields=FIELDS)
    entry = _entry(plan_cache)
    assert entry["dropped"] == {} and entry["compile_s"] > 0 and entry["error_vs_stock"]["compiled"] <= 1e-3
    torch.manual_seed(1)
    out = chosen.module(loss.x)  # the shape and mode it was compiled for: no second compile
    torch.manual_seed(1)
    torch.testing.assert_close(out, model(loss.x), rtol=1e-4, atol=1e-5)  # dropout masks alike too
    assert chosen.choice in ("eager", "compiled")
    assert plan.planner().entry("compile", FIELDS)["choice"] == entry["choice"]


# --- inference passes ---------------------------------------------------------------------------
def _inference_entry(plan_cache):
    data = json.loads(next(plan_cache.glob("*.json")).read_text())["decisions"]
    return next(v for k, v in data.items() if k.startswith("compile ") and "pass=inference" in k)


@pytest.mark.parametrize("winner", ["eager", "compiled"])
def test_inference_passes_follow_the_timing_table_under_their_own_key(planner_with, plan_cache, fake_compile,
                                                                      tiny, winner):
    planner_with({"eager": 0.5 if winner == "eager" else 1.0, "compiled": 0.5 if winner == "compiled" else 1.0})
    model, loss = tiny
    model.eval()
    chosen = compile_for_inference(model, lambda m: m(loss.x), fields=FIELDS)
    assert chosen.choice == winner and isinstance(chosen.module, FakeCompiled) == (winner == "compiled")
    entry = _inference_entry(plan_cache)
    assert entry["timed"] == "inference passes" and entry["choice"] == winner
    assert plan.planner().entry("compile", FIELDS) is None  # the training step's record is another


def test_inference_passes_drop_a_disagreeing_compile_and_count_the_compile_time(planner_with, plan_cache,
                                                                               fake_compile, tiny):
    p = planner_with({"eager": 1.0, "compiled": 0.1})
    model, loss = tiny
    model.eval()
    fake_compile(offset=1e-3)  # 0.1% off: more than inference's 1e-4 tolerance
    chosen = compile_for_inference(model, lambda m: m(loss.x), fields=FIELDS)
    assert chosen.choice == "eager" and "differs from eager" in _inference_entry(plan_cache)["dropped"]["compiled"]
    # A compile of 100 s on record (the fake one above took what this host's clock says: too little
    # to judge by), so that whether 3 passes repay one does not depend on how busy the host is.
    runs = {"eager": lambda: torch.ones(1), "compiled": lambda: torch.ones(1)}
    p.decide("compile", {**FIELDS, "batch": "64x6"}, lambda: runs, extra=lambda: {"compile_s": 100.0})
    few = compile_for_inference(model, lambda m: m(loss.x), fields={**FIELDS, "batch": "1x6"}, calls=3)
    assert few.choice == "eager" and "3 passes" in few.why and "too few to repay a compile" in few.why


@pytest.mark.slow
def test_a_real_inference_compile_agrees_with_eager(planner_with, plan_cache, tiny):
    planner_with()
    model, loss = tiny
    model.eval()
    chosen = compile_for_inference(model, lambda m: m(loss.x), fields=FIELDS)
    entry = _inference_entry(plan_cache)
    assert entry["dropped"] == {} and entry["compile_s"] > 0 and entry["error_vs_stock"]["compiled"] <= 1e-4
    with torch.inference_mode():
        torch.testing.assert_close(chosen.module(loss.x), model(loss.x), rtol=1e-5, atol=1e-6)


# --- one-token decode steps -----------------------------------------------------------------------
def _decode(offset: float = 0.0):
    """A decode step's candidates: `step` stands for the static graph; call(f) runs it, eager() the stock way."""
    x = torch.randn(3, 5)
    step = lambda x: x * 2.0  # noqa: E731
    return step, (lambda f: f(x) * (1.0 + offset)), (lambda: x * 2.0)


@pytest.fixture
def fake_function_compile(monkeypatch):
    compiled = []
    monkeypatch.setattr(compiled_module, "_compile", lambda f, **kw: compiled.append(kw) or f)
    return compiled


def test_decode_steps_are_timed_under_their_own_key_once_they_could_repay_a_compile(planner_with, plan_cache,
                                                                                    fake_function_compile):
    p = planner_with({"eager": 1.0, "compiled": 0.5})
    few = compile_for_decode(*_decode(), fields=FIELDS, tokens=3)
    assert few.choice == "eager" and "3 steps" in few.why and p.timer.calls == []
    many = compile_for_decode(*_decode(), fields=FIELDS, tokens=10**12)
    assert many.choice == "compiled" and fake_function_compile == [{"dynamic": False, "fullgraph": True}]
    assert plan.planner().entry("compile", {**FIELDS, "pass": "decode"})["timed"] == "decode steps"


def test_decode_estimates_its_compile_from_decode_compiles_only(planner_with, plan_cache, fake_function_compile):
    """A training step's slow compile on record does not hold back the small decode graph."""
    p = planner_with({"eager": 1.0, "compiled": 0.5})
    runs = {"eager": lambda: torch.ones(1), "compiled": lambda: torch.ones(1)}
    p.decide("compile", FIELDS, lambda: runs, extra=lambda: {"compile_s": 1e15})
    assert compile_for_decode(*_decode(), fields=FIELDS, tokens=10**12).choice == "compiled"
    assert compile_for_training(nn.Linear(2, 2), lambda m: m(torch.ones(1, 2)).sum(), fields={"model": "other"},
                                steps=10**6).choice == "eager"  # ~1e15 s of compiling: not measured


def test_training_estimates_its_compile_from_other_than_decode_compiles(planner_with, plan_cache, fake_compile,
                                                                      tiny):
    """The other way round: a 1 s decode compile on record does not make a whole step look cheap to
    compile (the first estimate, 60 s, stays)."""
    p = planner_with({"eager": 1.0, "compiled": 0.5})
    runs = {"eager": lambda: torch.ones(1), "compiled": lambda: torch.ones(1)}
    p.decide("compile", {**FIELDS, "pass": "decode"}, lambda: runs, extra=lambda: {"compile_s": 1.0})
    chosen = compile_for_training(*tiny, fields=FIELDS, steps=100)
    assert chosen.choice == "eager" and "too few to repay a compile (~60 s here)" in chosen.why


def test_a_decode_step_that_disagrees_is_dropped(planner_with, plan_cache, fake_function_compile):
    planner_with({"eager": 1.0, "compiled": 0.1})
    chosen = compile_for_decode(*_decode(offset=1e-3), fields=FIELDS, tokens=None)
    assert chosen.choice == "eager"


def test_a_compile_that_raised_records_no_compile_time(planner_with, plan_cache, monkeypatch):
    """Else its 0 s would pass for a free compile, and every new shape would be measured at once."""
    planner_with({"eager": 1.0, "compiled": 0.1})

    def no_compiler(f, **kw):
        def fails(*a):
            raise RuntimeError("inductor: no C++ compiler found")
        return fails
    monkeypatch.setattr(compiled_module, "_compile", no_compiler)
    assert compile_for_decode(*_decode(), fields=FIELDS, tokens=None).choice == "eager"
    entry = plan.planner().entry("compile", {**FIELDS, "pass": "decode"})
    assert "no C++ compiler" in entry["dropped"]["compiled"] and "compile_s" not in entry
