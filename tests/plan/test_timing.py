"""measure(): warm-up, alternating rounds, the median, the budget; pick(): the margin."""
import pytest

from anyformer.plan.timing import measure, pick


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def costing(self, *seconds: float):
        """A call that advances the clock by the next of `seconds` (the last one repeats)."""
        calls = []

        def run():
            calls.append(1)
            self.t += seconds[min(len(calls), len(seconds)) - 1]
        run.calls = calls
        return run


def test_median_of_rounds_after_warm_up():
    clock = Clock()
    slow_first = clock.costing(1.0, 0.010, 0.011, 0.5, 0.012)  # a 1 s warm-up and one 0.5 s outlier
    steady = clock.costing(0.020)
    m = measure({"a": slow_first, "b": steady}, budget_s=0.0, clock=clock, min_rounds=4, max_rounds=4)
    assert m.rounds == 4 and m.inner == {"a": 1, "b": 1}
    assert m.times["a"] == pytest.approx((0.011 + 0.012) / 2)  # median of 0.010, 0.011, 0.5, 0.012
    assert m.times["b"] == pytest.approx(0.020)
    assert len(slow_first.calls) == 5  # warm-up + 4 rounds


def test_budget_sets_the_rounds_between_min_and_max():
    clock = Clock()
    runs = {"a": clock.costing(0.01), "b": clock.costing(0.01)}  # a round costs 0.02 s
    assert measure(runs, budget_s=0.11, clock=clock, max_rounds=9).rounds == 5
    assert measure(runs, budget_s=10.0, clock=clock, max_rounds=9).rounds == 9
    assert measure(runs, budget_s=0.0, clock=clock, min_rounds=3).rounds == 3


def test_short_calls_are_repeated_inside_one_timing():
    clock = Clock()
    tiny = clock.costing(2.0 ** -16)  # binary fractions: the clock's sums are exact
    m = measure({"tiny": tiny}, budget_s=0.0, clock=clock, min_rounds=3, min_batch_s=2.0 ** -10)
    assert m.inner["tiny"] == 64
    assert len(tiny.calls) == 1 + 3 * 64
    assert m.times["tiny"] == pytest.approx(2.0 ** -16)


def test_a_candidate_that_raises_is_reported_not_fatal():
    clock = Clock()
    state = {"n": 0}

    def flaky():
        state["n"] += 1
        clock.t += 0.01
        if state["n"] == 3:
            raise RuntimeError("out of\nmemory")

    m = measure({"ok": clock.costing(0.01), "flaky": flaky, "never": lambda: 1 / 0}, budget_s=0.0, clock=clock)
    assert set(m.times) == {"ok"}
    assert m.errors["flaky"] == "RuntimeError: out of memory"
    assert m.errors["never"].startswith("ZeroDivisionError")


@pytest.mark.parametrize("times, margin, expected", [
    ({"stock": 1.0, "x": 0.5}, 0.1, "x"),
    ({"stock": 1.0, "x": 0.95}, 0.1, "stock"),           # 5% faster: not a clear win
    ({"stock": 1.0, "x": 0.90}, 0.1, "x"),               # 1.0 >= 1.1 * 0.9
    ({"stock": 1.0, "x": 0.8, "y": 0.6}, 0.1, "y"),
    ({"stock": 1.0, "x": 0.8}, 0.5, "stock"),
    ({"x": 0.1}, 0.1, "stock"),                          # stock has no time: keep stock
    ({"stock": 1.0}, 0.1, "stock"),
])
def test_pick(times, margin, expected):
    assert pick(times, "stock", margin) == expected
