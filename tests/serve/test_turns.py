"""The heavy lane takes turns with the light one (anyformer/serve/worker.py), and generation's cost
estimate counts what a long generation does (anyformer/serve/generate.py). No model here: steps
that sleep, and a stand-in model of a given context."""
from __future__ import annotations

import time
from types import SimpleNamespace

import anyio
import pytest

from anyformer.serve.context import Context
from anyformer.serve.generate import generation_seconds, most_tokens
from anyformer.serve.limits import Limits
import anyformer.serve.worker as worker_module
from anyformer.serve.worker import ModelWorker, charge, take_turn, turns_at_blocks

STEP_S = 0.02


def burn(seconds: float) -> None:
    """A step that uses `seconds` of this thread's CPU, however busy the machine is."""
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        pass


def _heavy_steps(worker: ModelWorker, steps: int) -> float:
    """Seconds for `steps` heavy-lane calls of STEP_S of CPU each."""
    async def go() -> float:
        started = time.perf_counter()
        for _ in range(steps):
            await worker.call(burn, STEP_S, lane="heavy")
        return time.perf_counter() - started
    return anyio.run(go)


def test_heavy_work_takes_its_share_while_light_requests_are_in_and_runs_flat_out_when_none_are():
    worker = ModelWorker(2, heavy_share=0.25)
    alone = _heavy_steps(worker, 10)
    release = worker.lanes["light"].admit()  # a light request in the server
    try:
        turns = _heavy_steps(worker, 10)
    finally:
        release()
    # 25%: each step's 20 ms of CPU is followed by 60 ms for the light lane (the last one's wait
    # comes before the next call, so 9 of them here), whatever else the machine is doing.
    assert turns >= 10 * STEP_S + 9 * 3 * STEP_S * 0.95, turns
    assert alone < 0.5 * turns, (alone, turns)


def test_cpu_charged_for_another_process_counts_in_the_turns():
    """A heavy call that waits on a child process (a picture's decoder) uses no CPU of its own; the
    child's time, charged by the call, is what its turn counts."""
    worker = ModelWorker(2, heavy_share=0.25)

    def decoded_elsewhere() -> None:
        time.sleep(STEP_S)  # the child's work, done while this thread waits
        charge(STEP_S)

    async def go() -> float:
        started = time.perf_counter()
        for _ in range(5):
            await worker.call(decoded_elsewhere, lane="heavy")
        return time.perf_counter() - started
    release = worker.lanes["light"].admit()
    try:
        took = anyio.run(go)
    finally:
        release()
    assert took >= 5 * STEP_S + 4 * 3 * STEP_S * 0.95, took  # uncharged, the calls would follow at once


def _one_call(worker: ModelWorker, fn, lane: str = "heavy") -> float:
    async def go() -> float:
        started = time.perf_counter()
        await worker.call(fn, lane=lane)
        return time.perf_counter() - started
    return anyio.run(go)


def test_a_long_heavy_call_takes_its_turns_inside_itself_where_it_asks():
    """One call of 5 pieces of 20 ms of CPU, `take_turn()` after each (as the model's blocks do): while a light
    request is in, each piece is followed by its turn's pause inside the call; with none, or in the light
    lane, it runs straight through."""
    def step() -> None:
        for _ in range(5):
            burn(STEP_S)
            take_turn()
    worker = ModelWorker(2, heavy_share=0.25)
    alone = _one_call(worker, step)
    release = worker.lanes["light"].admit()
    try:
        paused = _one_call(worker, step)
        light = _one_call(worker, step, lane="light")
    finally:
        release()
    assert paused >= 5 * STEP_S + 5 * 3 * STEP_S * 0.95, paused  # 25%: 60 ms after each 20 ms piece
    assert alone < 0.5 * paused and light < 0.5 * paused, (alone, light, paused)


def test_a_call_that_took_turns_inside_owes_only_the_work_since_its_last_pause():
    """The turn after a call counts what it did since it last paused inside: paused for already, the rest
    would be waited out twice."""
    worker = ModelWorker(2, heavy_share=0.25)

    def step() -> None:
        burn(0.1)
        take_turn()  # paid for: 300 ms inside
        burn(0.002)
    release = worker.lanes["light"].admit()
    try:
        _one_call(worker, step)
        waited = worker.lanes["heavy"]._next_turn - time.perf_counter()
    finally:
        release()
    assert waited < 0.1, waited  # 3 x the 2 ms after the pause (plus the clock's slack), not 3 x 102 ms


def test_a_turn_is_taken_before_each_block_of_a_served_model(monkeypatch):
    import torch

    from anyformer.models.vit import ViT, ViTConfig
    calls = []
    monkeypatch.setattr(worker_module, "take_turn", lambda: calls.append(1))
    model = ViT(ViTConfig(image_size=8, patch_size=4, in_chans=1, num_classes=2, width=16, depth=3, heads=2)).eval()
    handles = turns_at_blocks(model)
    with torch.no_grad():
        model(torch.zeros(1, 1, 8, 8))
    assert len(handles) == 3 and len(calls) == 3
    for h in handles:
        h.remove()
    assert turns_at_blocks(torch.nn.Linear(2, 2)) == []  # no blocks: nothing to pace


def test_a_waiting_heavy_step_goes_once_the_light_requests_have_left():
    worker = ModelWorker(2, heavy_share=0.01)  # after a 20 ms step, a wait of about 2 s
    release = worker.lanes["light"].admit()

    async def go() -> float:
        await worker.call(burn, STEP_S, lane="heavy")
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, lambda: (time.sleep(0.1), release()))
            started = time.perf_counter()
            await worker.call(burn, STEP_S, lane="heavy")
            return time.perf_counter() - started
    assert anyio.run(go) < 1.0


def test_requests_of_many_slices_are_served_whole_in_the_order_they_came():
    """Two heavy requests of several slices each: the second's steps wait until the first has had all of
    its own (in turns, slice by slice, both ran past a deadline that one of them alone would have met)."""
    worker = ModelWorker(2)
    order: list[str] = []
    client = SimpleNamespace(receive=anyio.sleep_forever, scope={})  # a client that stays

    def steps(name: str):
        for _ in range(12):  # 12 steps of 5 ms: 3 slices or more
            burn(0.005)
            order.append(name)
            yield name

    async def go() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.collect, client, "heavy", steps("first"))
            await anyio.sleep(0.002)
            tg.start_soon(worker.collect, client, "heavy", steps("second"))
    anyio.run(go)
    assert order == ["first"] * 12 + ["second"] * 12, order


def test_a_request_the_lane_would_not_finish_by_its_deadline_is_refused_at_once():
    """Admission counts the requests in the lane, each as long as the lane's served ones took: one that
    would end past its deadline is refused now (503, Retry-After), not stopped with 504 at the deadline."""
    from anyformer.serve.limits import ApiError
    worker = ModelWorker(2)
    lane = worker.lanes["heavy"]
    assert lane.admit(time.perf_counter() + 1e-3)() is None  # nothing served yet: no estimate, let in
    async def one_served() -> None:  # one request served: about 0.1 s
        await worker.call(time.sleep, 0.1, lane="heavy")
    anyio.run(one_served)
    assert 0.1 <= lane.served < 1.0, lane.served
    held = [lane.admit() for _ in range(3)]  # three requests in the lane (one place): about 0.4 s with a 4th
    try:
        with pytest.raises(ApiError) as refused:
            lane.admit(time.perf_counter() + 0.3)
        assert refused.value.status == 503 and refused.value.reason == "past_deadline_heavy"
        assert int(refused.value.headers["Retry-After"]) >= 1 and "--deadline-seconds" in refused.value.message
        lane.admit(time.perf_counter() + 4 * lane.served + 1.0)()  # time enough: let in
        lane.admit()()  # no deadline known (a call from outside the guard): let in
    finally:
        for release in held:
            release()
    lane.admit(time.perf_counter() + 1.5 * lane.served)()  # an empty lane: only its own time counts


def test_a_request_of_known_cost_is_expected_to_take_it_at_the_lanes_pace():
    """A request whose section estimated its work (seconds alone) is expected to hold its place that long times
    the lane's measured pace, and before any is measured times 1 / share: a burst on a fresh server is refused
    past what fits its deadline, not let in to run into it."""
    from anyformer.serve.limits import ApiError
    worker = ModelWorker(2, heavy_share=0.5)
    lane = worker.lanes["heavy"]
    assert lane.expect(1.0) == 2.0 and lane.expect(None) is None  # nothing measured: 1 / share; unknown
    until = time.perf_counter() + 5.0
    held = [lane.admit(until, cost=1.0), lane.admit(until, cost=1.0)]  # about 2 s each, one after the other
    try:
        with pytest.raises(ApiError) as refused:
            lane.admit(until, cost=1.0)  # 6 s > 5 s
        assert refused.value.reason == "past_deadline_heavy"
        lane.admit(until, cost=0.25)()  # 4.5 s: let in
    finally:
        for release in held:
            release()

    async def served(cost: float) -> None:  # a request that holds its place 0.1 s against an estimate of `cost`
        await lane.call(time.sleep, 0.1, cost=cost)
    anyio.run(served, 0.05)
    assert 1.9 <= lane.pace < 10, lane.pace  # 0.1 s for 0.05 s of estimated work
    assert lane.served is None  # a request of known cost says nothing of the unknown-cost average


def test_a_request_stopped_unfinished_raises_the_lanes_estimate_to_what_it_took_at_least():
    """A request its deadline (or its client, or the shutdown) stopped held its place at least that long: the
    lane's pace (or its unknown-cost estimate) is raised to that where it was below and never lowered, so that
    the next such request is refused at once rather than let in to be stopped the same way."""
    from anyformer.serve.limits import ApiError
    worker = ModelWorker(2, heavy_share=0.5)
    lane = worker.lanes["heavy"]

    async def stopped(after: float, cost: float | None) -> None:  # holds its place until cancelled
        with anyio.move_on_after(after):
            async with lane.place(cost=cost):
                await anyio.sleep(10)
    anyio.run(stopped, 0.3, 0.05)  # 0.3 s for 0.05 s of estimated work, unfinished: a pace of at least 6
    assert 6.0 <= lane.pace < 20, lane.pace
    until = time.perf_counter() + 0.25
    with pytest.raises(ApiError) as refused:  # 0.05 x 6 = 0.3 s > 0.25 s left: refused now
        lane.admit(until, cost=0.05)
    assert refused.value.reason == "past_deadline_heavy"
    anyio.run(stopped, 0.01, 0.05)  # one stopped at once (its client gone) says nothing new: not lowered
    assert lane.pace >= 6.0, lane.pace

    anyio.run(stopped, 0.01, None)  # unknown cost, nothing served yet: a client gone at once sets no estimate
    assert lane.served is None

    async def served_whole() -> None:
        async with lane.place():
            await anyio.sleep(0.05)
    anyio.run(served_whole)
    assert 0.05 <= lane.served < 0.2, lane.served
    anyio.run(stopped, 0.3, None)  # then one stopped after 0.3 s: at least that
    assert 0.3 <= lane.served < 5, lane.served
    served = lane.served
    anyio.run(stopped, 0.01, None)
    assert lane.served == served


def test_a_request_that_would_now_end_past_its_deadline_is_refused_as_it_starts_before_any_work():
    """Let in at one pace, a request waits for its place while the requests ahead show the lane slower: as it
    starts it is checked again, and refused (503) before its first step when it would end past its deadline."""
    from anyformer.serve.limits import ApiError
    lane = ModelWorker(2, heavy_share=0.5).lanes["heavy"]
    taken: list[int] = []

    def work():
        for i in range(3):
            taken.append(i)
            yield i

    release = lane.admit(time.perf_counter() + 0.5, cost=0.1)  # 0.1 x 2 = 0.2 s expected: let in
    lane.pace = 10.0  # what the requests ahead of it showed meanwhile: 1 s for it
    try:
        with pytest.raises(ApiError) as refused:
            anyio.run(worker_module._gather, lane, work(), 0.1, time.perf_counter() + 0.5)
        assert refused.value.status == 503 and refused.value.reason == "past_deadline_heavy"
        assert taken == [] and lane.pace == 10.0  # no step taken; a refusal teaches the lane nothing
        assert anyio.run(worker_module._gather, lane, work(), 0.1, time.perf_counter() + 5.0) == [0, 1, 2]
    finally:
        release()


def test_a_share_outside_0_to_1_is_refused():
    with pytest.raises(ValueError, match="share of the time, in \\(0, 1\\], got 1.5"):
        Limits(heavy_share=1.5)
    with pytest.raises(ValueError, match="heavy_share must be a positive number, got 0"):
        Limits(heavy_share=0)


def _lm(context: int = 256, **costs: float) -> SimpleNamespace:
    model = SimpleNamespace(config=SimpleNamespace(context=context))
    return SimpleNamespace(model=model, limits=Limits(max_work_seconds=5.0, max_new_tokens=1000),
                           costs={"token": 1e-3, "token_full": 2e-3, "refill": 0.1, **costs})


def test_generation_cost_counts_the_cache_size_and_each_refill_past_the_context():
    ctx = _lm()
    # 8 + 50 tokens fit a cache of 64 positions: the prompt (at least a step), 49 steps at the small cache's time.
    assert generation_seconds(ctx, 8, 50) == pytest.approx(max(1e-3, 0.1 * 8 / 192) + 49 * 1e-3)
    # 8 + 1000 tokens: every step with the whole context's cache; the window (256) slides every 64
    # tokens once full: ceil((1008 - 256) / 64) = 12 refills of 0.1 s.
    assert generation_seconds(ctx, 8, 1000) == pytest.approx(0.1 * 8 / 192 + 999 * 2e-3 + 12 * 0.1)
    # A cache of 128 positions: a step's time a third of the way from the smallest to the context's.
    assert generation_seconds(ctx, 8, 100) == pytest.approx(0.1 * 8 / 192 + 99 * (1e-3 + 1e-3 * 64 / 192))


def test_the_most_tokens_quoted_fit_the_budget_and_one_more_does_not():
    ctx = _lm(refill=0.3)
    most = most_tokens(ctx, 8)
    assert 0 < most < 1000
    assert generation_seconds(ctx, 8, most) <= 5.0 < generation_seconds(ctx, 8, most + 1)
    assert most_tokens(_lm(refill=0.0, token_full=1e-6, token=1e-6), 8) == 1000  # the API's own limit


def test_a_long_generation_of_a_fast_model_takes_turns_and_a_short_one_does_not():
    """At a small char model's measured costs (0.17 ms a token, 3.5 ms a refill, a context of 256), 700 tokens
    are about 0.2 s: heavy work, which must take turns with the light requests; 4 tokens stay light."""
    costs = {"token": 1.7e-4, "token_full": 1.9e-4, "refill": 3.5e-3}
    lm = _lm(**costs)
    ctx = Context(run_dir="", model=lm.model, meta={}, limits=lm.limits, worker=ModelWorker(2), costs=costs)
    assert ctx.check_cost(generation_seconds(ctx, 6, 700), "", "") == "heavy"
    assert ctx.check_cost(generation_seconds(ctx, 6, 4), "", "") == "light"


def test_a_small_sample_stays_light_on_a_processor_at_half_the_speed():
    """The MNIST generator's measured costs (2.2 ms a pass, 3.5 ms an image in it), doubled: one picture in two
    guided steps is about 56 ms, light; sixteen in ten steps, heavy."""
    from anyformer.serve.sample import work_seconds
    ctx = Context(run_dir="", model=None, meta={}, limits=Limits(), worker=ModelWorker(2),
                  costs={"pass": 2 * 2.2e-3, "pass_image": 2 * 3.5e-3})
    assert ctx.check_cost(work_seconds(ctx, 1, 2, 2.0), "", "") == "light"
    assert ctx.check_cost(work_seconds(ctx, 16, 10, 2.0), "", "") == "heavy"
