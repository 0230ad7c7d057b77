"""The planner: faked timing picks, margin, dropped candidates, the cache, forcing, fallbacks."""
import json
import time

import pytest
import torch

from anyformer import plan
from anyformer.plan import Planner, host
from anyformer.plan.store import FORMAT

SHAPE = {"n": 4}


def _decide(p, toy, **kw):
    return p.decide("toy", SHAPE, toy.build, tolerance=1e-6, **kw)


@pytest.mark.parametrize("winner", ["stock", "fast", "faster"])
def test_faked_timing_table_picks_its_favourite(toy, planner_with, plan_cache, winner):
    p = planner_with({n: (0.5 if n == winner else 1.0) for n in ("stock", "fast", "faster")})
    t = toy()
    assert _decide(p, t) == winner
    entry = json.loads(next(plan_cache.glob("*.json")).read_text())["decisions"]["toy n=4"]
    assert entry["choice"] == winner and entry["times"][winner] == 0.5 and entry["dropped"] == {}


@pytest.mark.parametrize("fast, margin, expected", [
    (0.95, 0.1, "stock"), (0.92, 0.1, "stock"), (0.9, 0.1, "fast"), (0.8, 0.3, "stock"), (0.8, 0.2, "fast")])
def test_a_win_smaller_than_the_margin_keeps_stock(toy, planner_with, fast, margin, expected):
    p = planner_with({"stock": 1.0, "fast": fast, "faster": 1.0}, margin=margin)
    assert _decide(p, toy()) == expected


def test_a_candidate_that_raises_is_dropped(toy, planner_with):
    def broken():
        raise RuntimeError("no kernel for this shape")
    p = planner_with({"stock": 1.0, "fast": 0.8, "faster": 0.1})
    assert _decide(p, toy(faster=broken)) == "fast"
    entry = p.snapshot()["entries"]["toy n=4"]
    assert entry["dropped"] == {"faster": "raised RuntimeError: no kernel for this shape"}
    assert p.timer.calls == [["stock", "fast"]]  # never timed


def test_a_candidate_that_disagrees_is_dropped(toy, planner_with):
    p = planner_with({"stock": 1.0, "fast": 0.8, "faster": 0.1})
    assert _decide(p, toy(faster=torch.tensor([1.0, 1.0, 1.0, 1.001]))) == "fast"
    entry = p.snapshot()["entries"]["toy n=4"]
    assert entry["dropped"]["faster"].startswith("differs from stock: error 1.00e-03 of scale")
    assert entry["error_vs_stock"] == {"fast": 0.0, "faster": 0.001}
    # the wrong shape is a disagreement too, whatever the values
    q = planner_with({"stock": 1.0, "fast": 0.8, "faster": 0.1})
    assert q.decide("toy", {"n": 5}, toy(faster=torch.ones(5)).build, tolerance=1.0) == "fast"


def test_the_cache_is_reused_by_the_next_process(toy, planner_with, plan_cache):
    t = toy()
    assert _decide(planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9}), t) == "fast"
    later = planner_with({"stock": 0.1, "fast": 1.0, "faster": 1.0})  # would pick stock if it measured
    assert _decide(later, t) == "fast" and t.builds == 1 and later.timer.calls == []
    assert len(list(plan_cache.glob("*.json"))) == 1


def test_cached_times_are_judged_again_with_the_current_margin(toy, planner_with):
    t = toy()
    assert _decide(planner_with({"stock": 1.0, "fast": 0.85, "faster": 0.95}), t) == "fast"
    assert _decide(planner_with({}, margin=0.25), t) == "stock" and t.builds == 1


def test_a_changed_machine_key_measures_again(toy, planner_with, plan_cache):
    t = toy()
    assert _decide(planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9}, machine=host.machine), t) == "fast"
    other = lambda threads: {**host.machine(threads), "cpu": "Other CPU", "key": "0123456789ab"}  # noqa: E731
    p = planner_with({"stock": 1.0, "fast": 0.9, "faster": 0.5}, machine=other)
    assert _decide(p, t) == "faster" and t.builds == 2
    assert len(list(plan_cache.glob("*.json"))) == 2  # one file per machine key


def test_a_changed_thread_count_is_another_machine(toy, planner_with, plan_cache):
    before = torch.get_num_threads()
    t = toy()
    p = planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9})
    try:
        torch.set_num_threads(1 if before != 1 else 2)
        assert _decide(p, t) == "fast"
        torch.set_num_threads(before)
        assert _decide(p, t) == "fast" and t.builds == 2
    finally:
        torch.set_num_threads(before)
    assert len(list(plan_cache.glob("*.json"))) == 2


def test_a_file_written_for_another_machine_is_ignored(toy, planner_with):
    p = planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9})
    _decide(p, toy())
    path = p.snapshot()["path"]
    data = json.loads(path.read_text())
    data["machine"]["flags"] = ["avx2"]  # e.g. a file copied from another host under the same name
    data["decisions"]["toy n=4"]["times"] = {"stock": 1.0, "fast": 2.0, "faster": 0.1}
    path.write_text(json.dumps(data))
    t = toy()
    q = planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9})
    assert _decide(q, t) == "fast" and t.builds == 1
    assert any("another machine key" in n for n in q.notes)


@pytest.mark.parametrize("garbage", ["{not json", "[]", json.dumps({"format": "other/9"}), "\x00\xff"])
def test_a_corrupt_cache_file_is_measured_again(toy, planner_with, garbage):
    p = planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9})
    _decide(p, toy())
    path = p.snapshot()["path"]
    path.write_bytes(garbage.encode("latin-1"))
    t = toy()
    q = planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9})
    assert _decide(q, t) == "fast" and t.builds == 1 and q.notes
    assert json.loads(path.read_text())["format"] == FORMAT  # replaced by a good file


def test_a_malformed_entry_is_dropped_alone(toy, planner_with):
    p = planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9})
    _decide(p, toy())
    p.decide("toy", {"n": 8}, toy().build, tolerance=1e-6)
    path = p.snapshot()["path"]
    data = json.loads(path.read_text())
    data["decisions"]["toy n=8"]["times"] = {"stock": "fast"}
    path.write_text(json.dumps(data))
    t = toy()
    q = planner_with({"stock": 1.0, "fast": 1.0, "faster": 0.5})
    assert _decide(q, t) == "fast" and t.builds == 0  # n=4 still cached
    assert q.decide("toy", {"n": 8}, t.build, tolerance=1e-6) == "faster" and t.builds == 1


def test_the_environment_forces_over_the_cache_and_measurement(toy, planner_with, monkeypatch):
    t = toy()
    assert _decide(planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9}), t) == "fast"  # cached: fast
    monkeypatch.setenv("ANYFORMER_PLAN", "toy=stock")
    assert _decide(planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9}), t) == "stock"
    monkeypatch.setenv("ANYFORMER_PLAN", "toy=faster")
    assert _decide(planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9}), t) == "faster"
    assert t.builds == 1


def test_the_python_api_forces_over_the_environment(toy, planner_with, monkeypatch):
    monkeypatch.setenv("ANYFORMER_PLAN", "toy=fast")
    t = toy()
    p = planner_with({"stock": 1.0, "fast": 0.9, "faster": 0.5})
    assert _decide(p, t) == "fast"
    p.force(toy="faster")
    assert _decide(p, t) == "faster"
    with p.forcing("stock"):
        assert _decide(p, t) == "stock"
    assert _decide(p, t) == "faster"
    p.force("auto")  # set, forcing nothing: measure, whatever the environment says
    assert _decide(p, t) == "faster" and t.builds == 1
    p.force()
    assert _decide(p, t) == "fast"
    with plan.forcing(toy="stock"):  # the module-level API acts on the process's planner
        assert _decide(p, t) == "stock"
    with pytest.raises(ValueError, match="unknown choice 'quick' for toy"):
        p.force(toy="quick")


def test_stock_measures_nothing_and_writes_nothing(toy, planner_with, monkeypatch, plan_cache):
    monkeypatch.setenv("ANYFORMER_PLAN", "stock")
    t = toy()
    p = planner_with({"stock": 1.0, "fast": 0.1, "faster": 0.1})
    assert _decide(p, t) == "stock"
    assert plan.linear_kernel(4096, 64, 192, torch.float32, True) == "stock"
    assert plan.attention_kernel(8, 4, 64, 64, 16, torch.float32, False, True) == "fused"
    assert plan.amp_dtype("cpu", width=64) == "none"
    assert plan.adamw_impl([torch.zeros(10)]) == "foreach"
    assert t.builds == 0 and p.timer.calls == [] and p.planning_s == 0 and not plan_cache.exists()


def test_a_malformed_environment_raises_at_every_decision(toy, planner_with, monkeypatch):
    monkeypatch.setenv("ANYFORMER_PLAN", "toy=fastest")
    p = planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9})
    for _ in range(2):  # not remembered as if it were valid
        with pytest.raises(ValueError, match="ANYFORMER_PLAN: unknown choice 'fastest' for toy"):
            _decide(p, toy())


def test_a_forced_choice_this_build_lacks_is_an_error(toy, planner_with):
    p = planner_with({})
    p.force(toy="faster")
    with pytest.raises(ValueError, match=r"toy=faster is forced but not available here \(available: stock, fast\)"):
        _decide(p, toy(), available=("stock", "fast"))
    p.force(linear="onednn")
    with pytest.raises(ValueError, match="linear=onednn is forced but not available"):
        plan.linear_kernel(16, 8, 8, torch.float64, False)  # oneDNN's candidate is fp32/bf16 only


def test_any_failure_while_planning_gives_stock(toy, planner_with):
    def failing_build():
        raise MemoryError("no room for the inputs")
    p = planner_with({"stock": 1.0, "fast": 0.1, "faster": 0.1})
    assert p.decide("toy", SHAPE, failing_build, memo_key="k") == "stock"
    assert "planning failed (MemoryError: no room for the inputs)" in p.notes[-1]

    def stock_raises():
        raise RuntimeError("stock broke")
    assert _decide(p, toy(stock=stock_raises)) == "stock"
    assert "stock raised RuntimeError: stock broke" in p.notes[-1]
    assert p.snapshot()["entries"] == {}  # nothing cached from a failed plan


def test_an_unwritable_cache_still_answers(toy, planner_with, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ANYFORMER_CACHE", str(blocker))
    p = planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9})
    assert _decide(p, toy()) == "fast"
    assert any("could not write the plan file" in n for n in p.notes)


def test_the_process_budget_bounds_planning(toy, planner_with):
    t = toy()
    p = planner_with({"stock": 1.0, "fast": 0.1, "faster": 0.1}, total_budget_s=0.0)
    assert _decide(p, t) == "stock" and t.builds == 0 and "planning budget" in p.notes[-1]


def test_planning_does_not_nest(toy, planner_with):
    p = planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9})
    inner = toy()

    def asks_again():
        assert p.decide("toy", {"n": 99}, inner.build) == "stock"  # inside a measurement: stock, unplanned
        return torch.ones(4)
    assert _decide(p, toy(fast=asks_again)) == "fast" and inner.builds == 0


def test_lookup_remembers_answers_until_reset(toy, planner_with):
    p = planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9})
    assert p.lookup("key") is None
    assert _decide(p, toy(), memo_key="key") == "fast"
    assert p.lookup("key") == "fast"
    p.reset()
    assert p.lookup("key") is None


def test_real_timing_end_to_end(toy, planner_with, plan_cache):
    """The default timer and clock on two trivially different candidates: one sleeps 4x longer."""
    def slow():
        time.sleep(0.004)
        return torch.ones(4)

    def quick():
        time.sleep(0.001)
        return torch.ones(4)
    p = Planner(budget_s=0.05)
    start = time.perf_counter()
    with plan.using(p):
        choice = p.decide("toy", SHAPE, lambda: {"stock": slow, "fast": quick}, tolerance=0.0)
    elapsed = time.perf_counter() - start
    entry = p.snapshot()["entries"]["toy n=4"]
    assert choice == "fast" and entry["times"]["fast"] < entry["times"]["stock"]
    assert entry["rounds"] >= 3 and 0 < p.planning_s <= elapsed < 1.0
    assert entry["seconds"] == pytest.approx(p.planning_s, abs=1e-6)  # rounded to 1 us
    saved = json.loads(next(plan_cache.glob("*.json")).read_text())
    assert saved["planning_s"] == pytest.approx(p.planning_s, abs=1e-5) and saved["machine"]["key"]


def test_max_error_is_relative_to_the_reference_scale():
    from anyformer.plan import max_error
    ref = torch.tensor([10.0, -20.0, 5.0])
    assert max_error(ref + torch.tensor([0.0, 0.2, 0.0]), ref) == pytest.approx(0.01, rel=1e-5)
    assert max_error((ref, [ref]), (ref, [ref])) == 0.0
    assert max_error(ref, (ref, ref)) == float("inf")  # another structure
    inf = torch.tensor([1.0, float("inf"), float("nan")])
    assert max_error(inf.clone(), inf) == 0.0  # the same non-finite pattern: compared where finite
    assert max_error(torch.tensor([1.0, float("inf"), 0.0]), inf) == float("inf")
    assert max_error(torch.tensor([1.0, 2.0, float("nan")]), torch.tensor([1.0, 2.0, 3.0])) == float("inf")
    assert max_error(torch.zeros(0), torch.zeros(0)) == 0.0
    assert max_error(ref.bfloat16(), ref) < 1e-2


def test_adopted_answers_win_over_this_process_own_plan_file(toy, planner_with):
    """Under torchrun a rank on another machine adopts rank 0's answers: its own plan file (here
    one that would pick "fast") is not asked for the keys rank 0 answered."""
    t = toy()
    assert _decide(planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9}), t) == "fast"  # this machine's file
    p = planner_with({"stock": 1.0, "fast": 0.5, "faster": 0.9})
    with p.recording() as answers:
        p.adopt({"toy n=4": "faster"})  # rank 0's
        assert _decide(p, t) == "faster" and answers["toy n=4"] == "faster" and p.pinned() == answers
    with pytest.raises(RuntimeError, match="inside recording"):
        p.adopt({"toy n=4": "faster"})
