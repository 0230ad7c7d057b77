"""Model work off the event loop, in two bounded lanes, each request cancellable between steps.

A forward pass blocks for milliseconds to seconds; run on the event loop it would stall every
other connection. Each call goes to a worker thread (torch releases the GIL inside its kernels,
so threads do run in parallel), under a capacity limiter.

Two lanes, so that light requests are not starved by heavy ones: "light" (a prediction, a short
generation) runs `concurrency` calls at once; "heavy" (sampling, a long generation, a large
upload) runs one, in its own thread, and takes turns: while light requests are in the server, it
takes at most `heavy_share` of a core's time (after a step that used t seconds of CPU it waits
t (1 - share) / share), and when none are, it runs flat out. Turns rather than a lower CPU
priority: a heavy step of a small model is mostly Python, and a thread at nice 5 that the scheduler
holds back while it has the GIL holds back the light calls waiting for it as well: in soaks, nice 5
on top of turns brought long generations close to their deadline at about the same light latency
(measured: docs/results.md, 'Measurements behind the code's choices').
Each lane admits at most its running calls plus `queue` waiting requests; past that a request is
refused at once with 503 and Retry-After, not queued without end. Nor is a request admitted that the lane
would not finish before its deadline, by what it and the requests ahead of it are expected to take
(`Lane.expect`): it would wait, start, and be stopped with 504, its client told after the whole deadline
instead of at once.
Heavy work is a sequence of short steps (one token, one ODE step), run in slices of about SLICE_S a
call; a request holds its place in the lane across its slices, so that a lane serves requests whole, in
the order they came, and the work can be stopped between slices: by the request's deadline or the
server's shutdown (anyformer/serve/guard.py), or by the client going away (watched here while the
answer is computed).
A step can be long (an ODE step of 16 guided samples of the MNIST generator: about 100 ms of a core), and a
light request that ran beside a whole one lost a core for its whole time while one beside none did not: the
light p99 under load was set by that, whatever the share (docs/results.md). So a heavy call also takes its
turns inside a step, at the model's blocks (`turns_at_blocks`, `take_turn`): after each PACE_QUANTUM_S of
work it pauses as the turns do between calls, and the share is kept in pieces a light request's time spans
many of.
"""
from __future__ import annotations

import asyncio
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Callable, Iterator, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread
import torch
from starlette.requests import Request

from .limits import HEAVY_SHARE, ApiError

T = TypeVar("T")
_DONE = object()
LANES = ("light", "heavy")
ON_FINISH = "anyformer.on_finish"  # scope key: functions the request guard calls when a request ends
DEADLINE_AT = "anyformer.deadline_at"  # scope key: the perf_counter time at which the guard stops the request
TURN_POLL_S = 0.005  # a waiting heavy step looks this often whether the light requests have gone
# Steps (tokens, ODE steps) go to a worker thread in slices of about this long, not one a call: each
# call is a hand-over through the event loop, which light requests keep busy; one token a call, a
# soak's 1,000-token generations (2.3 s alone) ran into their 30 s deadline. A stop lands within a slice.
SLICE_S = 0.02
# Inside a heavy call, the work between two pauses while light requests are in (`take_turn`): the pause after it
# is at most a light request's compute (tens of ms) at the default shares, and a block of the served models
# takes a few ms, so that a call keeps to its share within a step.
PACE_QUANTUM_S = 0.01


_elsewhere = threading.local()  # CPU seconds other processes spent for the call this thread runs
_pacing = threading.local()     # the background lane whose call this thread runs, and its work since the last pause


def charge(cpu_seconds: float) -> None:
    """Count `cpu_seconds` spent outside this thread for the call it is running (by a child process that
    decodes a picture) in that call's turn: a heavy call that waits on another process has used that
    process's time, not none. Called from inside the call's function; outside a heavy lane's call it has no effect."""
    _elsewhere.seconds = getattr(_elsewhere, "seconds", 0.0) + cpu_seconds


def take_turn() -> None:
    """In a heavy lane's call, once PACE_QUANTUM_S of work has been done since the last pause: pause as the lane's
    turns do between calls (that work x (1 - share) / share) if the lane it yields to has requests in it, and
    start counting afresh either way (with none in, the call runs flat out). Anywhere else it does nothing: a
    light request's thread runs straight through. Called between the model's blocks (`turns_at_blocks`)."""
    if torch.compiler.is_compiling():  # traced into a compiled step (a GPT's decode): no pause inside it
        return
    lane = getattr(_pacing, "lane", None)
    if lane is None:
        return
    used = _work_since(_pacing.wall, _pacing.cpu)
    if used < PACE_QUANTUM_S:
        return
    if lane.yields_to is not None and lane.yields_to.admitted > 0:
        time.sleep(used * (1 - lane.share) / lane.share)  # releases the GIL: the light calls run meanwhile
    _pacing.wall, _pacing.cpu = time.perf_counter(), time.thread_time()


def turns_at_blocks(model: torch.nn.Module) -> list[Any]:
    """`take_turn` before each block of `model`'s transformer (none where it has no backbone of blocks); returns
    the hooks' handles."""
    from ..nn.transformer import backbone_of
    try:
        blocks = backbone_of(model).blocks
    except TypeError:
        return []
    return [block.register_forward_pre_hook(lambda module, args: take_turn()) for block in blocks]


def _work_since(wall: float, cpu: float, elsewhere: float = 0.0) -> float:
    """The seconds of work this thread did since (perf_counter `wall`, thread_time `cpu`): its CPU times torch's
    threads, which may share it, plus `elsewhere` (other processes' CPU charged to it), at most the wall time."""
    return min(time.perf_counter() - wall, (time.thread_time() - cpu) * torch.get_num_threads() + elsewhere)


class ClientGone(Exception):
    """The client closed its connection before its answer was ready: its work was stopped."""


class Lane:
    """One lane: `concurrency` calls at once, `queue` more requests waiting, the rest refused.
    A background lane runs its calls in threads of its own. A lane that `yields_to` another runs at
    most `share` of the time while that one has requests in it."""

    def __init__(self, name: str, concurrency: int, queue: int, background: bool = False,
                 yields_to: "Lane | None" = None, share: float = 1.0) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"a lane's share of the time must be in (0, 1], got {share!r}")
        self.name, self.concurrency, self.queue = name, concurrency, queue
        self.yields_to, self.share = yields_to, share
        self._next_turn = 0.0      # perf_counter time before which this lane yields, while it must
        self._threads = ThreadPoolExecutor(concurrency, thread_name_prefix=f"anyformer-{name}") if background else None
        self.admitted = 0          # requests in the lane: waiting for a call or running one
        self.running = 0           # calls running now
        self.seconds = 0.1         # a moving average of a request's time in the lane, for Retry-After
        self.served: float | None = None  # moving averages, once measured: the seconds a request of unknown cost
        self.pace: float | None = None    # held its place, and those per second of its estimated cost (`expect`)
        self.ahead = 0.0                  # the seconds the requests in the lane are expected to hold places
        self._limiter: anyio.CapacityLimiter | None = None  # made inside the event loop that uses it

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.concurrency)
        return self._limiter

    @property
    def waiting(self) -> int:
        return self.admitted - self.running

    def expect(self, cost: float | None) -> float | None:
        """The seconds a request is expected to hold a place: its `cost` (seconds of work alone, from the step
        times its section measured at start) times the lane's measured pace, or before one is measured, times
        1 / share, as far as taking turns may stretch it; a request of unknown cost, as long as the lane's recent
        ones of unknown cost held theirs (None before one has)."""
        if cost is None:
            return self.served
        return cost * (self.pace if self.pace is not None else 1 / self.share)

    def admit(self, until: float | None = None, cost: float | None = None) -> Callable[[], None]:
        """Room in the lane for one request, or 503 at once when its queue is full or, with `until` (the
        perf_counter time of its deadline), when the requests in the lane and this one would take past it
        (`expect`; `cost`: the request's estimated seconds of work alone); returns the function that lets it
        go (safe to call more than once)."""
        if self.admitted >= self.concurrency + self.queue:
            retry = max(1, math.ceil(self.seconds * (self.waiting + 1) / self.concurrency))
            raise ApiError(503, f"the server is busy: {self.waiting} requests wait for the {self.name} lane "
                                f"(the queue holds {self.queue}, --queue); retry in {retry} s",
                           reason=f"queue_full_{self.name}", headers={"Retry-After": str(retry)})
        expected = self.expect(cost)
        if until is not None and expected is not None:
            # Served whole, in the order they came (see `place`): the ones in the lane first, then this one.
            # A running request counts whole, so the estimate errs towards refusing early, not 504 late.
            finish = self.ahead / self.concurrency + expected
            left = until - time.perf_counter()
            if finish > left:
                raise self._past_deadline(f"the {self.admitted} requests in the {self.name} lane and this one",
                                          finish, left)
        self.admitted += 1
        self.ahead += expected or 0.0
        started, held = time.perf_counter(), [True]

        def release() -> None:
            if held.pop() if held else False:
                self.admitted -= 1
                self.ahead = max(0.0, self.ahead - (expected or 0.0)) if self.admitted else 0.0
                self.seconds = 0.8 * self.seconds + 0.2 * (time.perf_counter() - started)
        return release

    def _past_deadline(self, who: str, finish: float, left: float) -> ApiError:
        retry = max(1, math.ceil(finish - left))
        return ApiError(503, f"the server is busy: {who} would take about {finish:.1f} s, past the "
                             f"{max(left, 0):.1f} s left of its deadline (--deadline-seconds); retry in {retry} s",
                        reason=f"past_deadline_{self.name}", headers={"Retry-After": str(retry)})

    @asynccontextmanager
    async def slot(self, until: float | None = None, cost: float | None = None) -> AsyncIterator[None]:
        release = self.admit(until, cost)
        try:
            yield
        finally:
            release()

    async def _turn(self) -> None:
        """Wait out this lane's pause while the lane it yields to has requests; go at once when it has none."""
        while self.yields_to is not None and self.yields_to.admitted > 0:
            wait = self._next_turn - time.perf_counter()
            if wait <= 0:
                return
            await anyio.sleep(min(wait, TURN_POLL_S))

    @asynccontextmanager
    async def place(self, cost: float | None = None, until: float | None = None) -> AsyncIterator[None]:
        """One of the lane's `concurrency` places, held by a request of many calls across all of them
        (`call(..., held=True)`), so that the lane serves such requests whole, in the order they came. With a
        place taken call by call they ran in turns, and when there were more than the lane could finish within
        the deadline, all ran past it: in a soak with 4 heavy sampling clients, not one was answered in 60 s
        (docs/results.md). `cost`: the request's estimated seconds of work alone (see `expect`). With `until` (its
        deadline), a request is checked again as it starts: since it was let in, the requests ahead of it may have
        shown the lane slower than expected, and one that would now end past its deadline is refused (503) before
        its work begins, not stopped with 504 when that work is lost."""
        borrower = object()  # not the task: a stream's generator may be closed from another one
        await self.limiter.acquire_on_behalf_of(borrower)
        try:
            with self._recorded(cost):
                expected = self.expect(cost) if until is not None else None
                if expected is not None and expected > until - time.perf_counter():
                    raise self._past_deadline("this request", expected, until - time.perf_counter())
                yield
        finally:
            self.limiter.release_on_behalf_of(borrower)

    @contextmanager
    def _recorded(self, cost: float | None) -> Iterator[None]:
        """The time a request holds its place, `_record`ed when it ends, served whole or stopped."""
        started, finished = time.perf_counter(), False
        try:
            yield
            finished = True
        finally:
            self._record(time.perf_counter() - started, cost, finished)

    def _record(self, seconds: float, cost: float | None, finished: bool = True) -> None:
        """A request held its place `seconds`: into the pace (per second of its cost) or the unknown-cost average.
        One stopped before its end (its deadline, the server's shutdown, its client gone) took at least that long:
        an estimate below that is raised to it, never lowered (the pace's starts at 1 / share; an unknown-cost
        average, once one request has been served whole: a client gone at once would set it near zero). While only
        requests served whole were counted, a soak's heavy requests that the estimate let in and their deadline
        stopped taught the lane nothing, and it let in the next ones to be stopped the same way (docs/results.md)."""
        if cost is not None and cost > 0:
            at_least = seconds / cost
            if finished:
                self.pace = _average(self.pace, at_least)
            elif at_least > self.expect(1.0):  # the pace now (1 / share before one is measured)
                self.pace = at_least
        elif cost is None:
            if finished:
                self.served = _average(self.served, seconds)
            elif self.served is not None and seconds > self.served:
                self.served = seconds

    async def call(self, fn: Callable[..., T], *args: Any, held: bool = False, cost: float | None = None) -> T:
        """fn(*args) in one of the lane's places (`held`: in the one the caller holds, see `place`; `cost`: see
        `expect`)."""
        if held:
            return await self._call(fn, *args)
        async with self.limiter:
            with self._recorded(cost):
                return await self._call(fn, *args)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        await self._turn()
        self.running += 1
        try:
            # Not abandoned on cancellation: the step in hand finishes (it is short), then the
            # cancellation lands, so no work goes on in the background after an answer.
            if self._threads is None:
                return await anyio.to_thread.run_sync(fn, *args, limiter=None)
            with anyio.CancelScope(shield=True):
                result, busy = await asyncio.wrap_future(self._threads.submit(_busy, self, fn, *args))
            self._next_turn = time.perf_counter() + busy * (1 - self.share) / self.share
            await anyio.lowlevel.checkpoint_if_cancelled()
            return result
        finally:
            self.running -= 1


def _average(mean: float | None, x: float) -> float:
    """A moving average that starts at its first value and follows the recent ones."""
    return x if mean is None else 0.8 * mean + 0.2 * x


def _busy(lane: Lane, fn: Callable[..., T], *args: Any) -> tuple[T, float]:
    """fn(*args), as a call of `lane` (its `take_turn`s), and the seconds of CPU it used since its last pause, as
    counted in this thread (times torch's threads, which may share the work) plus what it `charge`d for other
    processes; at most the wall time. The pause after a step is measured in CPU, not wall time: a step that
    light requests slowed down has not had more than its share."""
    _elsewhere.seconds = 0.0
    _pacing.lane, _pacing.wall, _pacing.cpu = lane, time.perf_counter(), time.thread_time()
    try:
        result = fn(*args)
    finally:
        _pacing.lane = None
    return result, _work_since(_pacing.wall, _pacing.cpu, _elsewhere.seconds)


class ModelWorker:
    def __init__(self, concurrency: int, queue: int = 16, heavy_concurrency: int = 1,
                 heavy_share: float = HEAVY_SHARE) -> None:
        light = Lane("light", concurrency, queue)
        self.lanes = {"light": light, "heavy": Lane("heavy", heavy_concurrency, queue, background=True,
                                                    yields_to=light, share=heavy_share)}

    async def call(self, fn: Callable[..., T], *args: Any, lane: str = "light") -> T:
        """One call in `lane`, without admission or watching (warm-up, tests)."""
        return await self.lanes[lane].call(fn, *args)

    async def run(self, request: Request, lane: str, fn: Callable[..., T], *args: Any,
                  cost: float | None = None) -> T:
        """fn(*args) in one call, admitted to `lane`; ClientGone if the client leaves first. `cost`: the
        request's estimated seconds of work alone, where its section has one (see `Lane.expect`)."""
        async with self.lanes[lane].slot(request.scope.get(DEADLINE_AT), cost):
            return await _watching(request, self.lanes[lane].call(fn, *args, cost=cost))

    async def collect(self, request: Request, lane: str, items: Iterator[T], cost: float | None = None) -> list[T]:
        """Every item of a blocking iterator, each `next` a separate call in `lane`: stopped at the
        next step (and `items` closed) when the client leaves, the deadline passes or the server stops."""
        until = request.scope.get(DEADLINE_AT)
        async with self.lanes[lane].slot(until, cost):
            return await _watching(request, _gather(self.lanes[lane], items, cost, until))

    def stream(self, request: Request, lane: str, items: Iterator[T], cost: float | None = None) -> AsyncIterator[T]:
        """A streamed answer's async iterator over a blocking one, admitted now (503 here, before
        any byte is sent, when the lane is full or would not finish it by its deadline). Starlette's
        StreamingResponse stops it when the client leaves; closing it closes `items`, so a generation
        stops at the next token."""
        release = self.lanes[lane].admit(request.scope.get(DEADLINE_AT), cost)
        # However the stream ends (even never started: a client gone before the first byte), the
        # request guard runs this when the request is over.
        request.scope.setdefault(ON_FINISH, []).append(release)

        async def admitted() -> AsyncIterator[T]:
            try:
                async for item in _steps(self.lanes[lane], items, cost):
                    yield item
            finally:
                release()
        return admitted()

    def depth(self) -> dict[str, dict[str, int]]:
        return {name: {"waiting": lane.waiting, "running": lane.running} for name, lane in self.lanes.items()}


def _slice(items: Iterator[T]) -> tuple[list[T], bool]:
    """(the next items of `items` computed within SLICE_S, in the calling thread; whether it is
    exhausted): a short request (a few tokens) is one call."""
    out: list[T] = []
    end = time.perf_counter() + SLICE_S
    while (item := next(items, _DONE)) is not _DONE:
        out.append(item)
        if time.perf_counter() >= end:
            return out, False
    return out, True


async def _steps(lane: Lane, items: Iterator[T], cost: float | None = None,
                 until: float | None = None) -> AsyncIterator[T]:
    """`items` in slices, in one place of `lane` held throughout (`until`: see `Lane.place`; a stream passes none,
    its answer having begun)."""
    try:
        async with lane.place(cost, until):
            done = False
            while not done:
                batch, done = await lane.call(_slice, items, held=True)
                for item in batch:
                    yield item
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()


async def _gather(lane: Lane, items: Iterator[T], cost: float | None = None,
                  until: float | None = None) -> list[T]:
    out: list[T] = []
    steps = _steps(lane, items, cost, until)
    try:
        async for item in steps:
            out.append(item)
    finally:
        await steps.aclose()
    return out


async def _watching(request: Request, work) -> T:
    """Await `work`, cancelled if the client disconnects first (then ClientGone). The body has been
    read by now, so the next message the server's receive gives is the disconnect, if any."""
    result: list[T] = []
    error: list[Exception] = []
    gone = False

    async def run(scope: anyio.CancelScope) -> None:
        try:
            result.append(await work)
        except Exception as e:  # noqa: BLE001 - raised as itself below, not wrapped in an ExceptionGroup
            error.append(e)
        scope.cancel()

    async def watch(scope: anyio.CancelScope) -> None:
        nonlocal gone
        while (await request.receive())["type"] != "http.disconnect":
            pass
        gone = True
        scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, tg.cancel_scope)
        tg.start_soon(watch, tg.cancel_scope)
    if error:
        raise error[0]
    if gone and not result:
        raise ClientGone("the client closed the connection; its work was stopped")
    return result[0]
