"""The clients of benchmarks/soak_serve.py: what a light, heavy or abusive request is for the run
the server serves (from its /api/info), and the loops that send them and count every answer.

Every request is counted once: answered (by status), left by design (the client closed first, on
purpose), lost (the connection failed without an answer) or hung (no answer within the deadline
plus a margin). Raw sockets send what httpx would not: a Content-Length the body never reaches,
a body dribbled in pieces, a connection closed before the answer.
"""
from __future__ import annotations

import asyncio
import collections
import functools
import io
import json
import math
import time
from dataclasses import dataclass, field

import httpx
from PIL import Image, ImageDraw

Request = tuple[str, str, bytes, dict[str, str]]   # method, path, body, headers
JSON = {"content-type": "application/json"}
PNG = {"content-type": "image/png"}


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile (0 for none)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] if ordered else 0.0


def png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


@functools.lru_cache(maxsize=None)
def digit(i: int, size: int = 28) -> bytes:
    """A stroke like a drawn 1 or 7, one of 16 kinds, white on black as MNIST is. Made once each:
    drawing a large one takes the client's loop long enough to show up in every latency."""
    i %= 16
    im = Image.new("L", (size, size))
    s = size / 28
    ImageDraw.Draw(im).line([((10 + i % 8) * s, 4 * s), ((14 - i % 5) * s, 24 * s)], fill=255, width=max(2, int(3 * s)))
    if i % 2:
        ImageDraw.Draw(im).line([(8 * s, 5 * s), ((10 + i % 8) * s, 4 * s)], fill=255, width=max(2, int(3 * s)))
    return png(im)


@functools.lru_cache(maxsize=None)
def bomb() -> bytes:
    """8,000 x 8,000 of one grey: a few kB on the wire, 64 megapixels once decoded."""
    return png(Image.new("L", (8000, 8000)))


@dataclass
class Tally:
    sent: int = 0
    status: collections.Counter = field(default_factory=collections.Counter)
    kinds: dict[str, collections.Counter] = field(default_factory=lambda: collections.defaultdict(collections.Counter))
    light_ms: list[float] = field(default_factory=list)
    heavy_s: list[float] = field(default_factory=list)
    left: int = 0
    lost: int = 0
    hung: int = 0

    def merge(self, other: "Tally") -> None:
        """Add another tally's counts and timings (clients run in another process) to this one."""
        self.sent += other.sent
        self.status.update(other.status)
        for kind, outcomes in other.kinds.items():
            self.kinds[kind].update(outcomes)
        self.light_ms += other.light_ms
        self.heavy_s += other.heavy_s
        self.left, self.lost, self.hung = self.left + other.left, self.lost + other.lost, self.hung + other.hung

    def add(self, kind: str, outcome: int | str) -> None:
        self.sent += 1
        self.kinds[kind][outcome] += 1
        if isinstance(outcome, int):
            self.status[outcome] += 1
        elif outcome == "left":
            self.left += 1
        elif outcome == "hung":
            self.hung += 1
        else:
            self.lost += 1


@dataclass
class Mix:
    """The requests for one server, by its model family."""
    url: str
    info: dict

    @classmethod
    def for_server(cls, url: str) -> "Mix":
        return cls(url, httpx.get(url + "/api/info", timeout=10).json())

    @property
    def family(self) -> str:
        return self.info["family"]

    @property
    def hang_seconds(self) -> float:
        return self.info["limits"]["deadline_seconds"] + 15

    def _fit(self, unit: str, per_unit: float = 1.0) -> int:
        """How many units (tokens, steps) fit in 70% of the cost budget."""
        return max(1, int(0.7 * self.info["limits"]["max_work_seconds"] / (self.info["measured_seconds"][unit] * per_unit)))

    def light(self, i: int) -> Request:
        if self.family == "vit":
            return "POST", "/api/predict", digit(i), PNG
        if self.family == "gpt":
            return "POST", "/api/generate", _json({"prompt": "ROMEO:", "max_new_tokens": 4, "seed": i}), JSON
        return "POST", "/api/sample", _json({"class": i % 10, "n": 1, "steps": 2, "seed": i}), JSON

    def heavy(self, i: int, stream: bool = False) -> Request:
        if self.family == "vit":  # a large picture: decoding and resizing it is the work
            return "POST", "/api/predict", digit(i, 2400), PNG
        if self.family == "gpt":
            tokens = max(1, int(0.7 * self.info["tokens_in_budget"]))  # the server's own estimate, refills and all
            return "POST", "/api/generate", _json({"prompt": "ROMEO:", "max_new_tokens": tokens, "seed": i,
                                                   "stream": stream}), JSON
        costs = self.info["measured_seconds"]
        steps = min(1000, self._fit("pass", 2 * (1 + costs["pass_image"] * 32 / max(costs["pass"], 1e-9))))
        return "POST", "/api/sample", _json({"class": i % 10, "n": 16, "steps": steps, "cfg": 2.0, "seed": i}), JSON

    def abusive(self, k: int) -> tuple[str, Request]:
        """The k-th abusive request (of those sent over httpx): (kind, request)."""
        path = self.light(0)[1]
        if self.family == "vit":
            over = ("too_many_pixels", ("POST", path, bomb(), PNG))
        elif self.family == "gpt":  # past the budget, or past the API's limit where every length fits it
            most = self.info["max_new_tokens"]
            kind, asked = ("over_budget", most) if self.info["tokens_in_budget"] < most else ("over_limit", most + 1)
            over = (kind, ("POST", path, _json({"prompt": "ROMEO:", "max_new_tokens": asked}), JSON))
        else:
            over = ("over_budget", ("POST", path, _json({"class": 1, "n": 16, "steps": 1000, "cfg": 2.0}), JSON))
        choices = [("malformed", ("POST", path, b"{this is not" if self.family != "vit" else b"not an image",
                                  JSON if self.family != "vit" else PNG)),
                   ("wrong_type", ("POST", path, b"hello", {"content-type": "text/plain"})),
                   over,
                   ("no_route", ("GET", "/api/nothing", b"", {}))]
        return choices[k % len(choices)]

    def warm(self) -> None:
        """Every body made once, before the timing starts (they are cached)."""
        for i in range(16):
            self.light(i), self.heavy(i), self.abusive(i)

    def describe(self) -> str:
        light, heavy = self.light(0), self.heavy(0)
        return (f"light: {light[0]} {light[1]} {light[2][:120]!r}; heavy: {heavy[0]} {heavy[1]} "
                f"{heavy[2][:120]!r} ({len(heavy[2])} bytes)")


def _json(values: dict) -> bytes:
    return json.dumps(values).encode()


async def send(client: httpx.AsyncClient, req: Request, answer: list | None = None) -> tuple[int | str, float]:
    """(the status, or 'hung' / 'lost: ...'; seconds); the response appended to `answer` when one is given."""
    method, path, body, headers = req
    started = time.perf_counter()
    try:
        r = await client.request(method, path, content=body, headers=headers)
        if answer is not None:
            answer.append(r)
        return r.status_code, time.perf_counter() - started
    except httpx.TimeoutException:
        return "hung", time.perf_counter() - started
    except httpx.HTTPError as e:
        return f"lost: {type(e).__name__}", time.perf_counter() - started


async def light_client(client, mix: Mix, tally: Tally, stop: float) -> None:
    i = 0
    while time.monotonic() < stop:
        outcome, seconds = await send(client, mix.light(i))
        tally.add("light", outcome)
        if outcome == 200:
            tally.light_ms.append(1000 * seconds)
        i += 1


def light_alone(url: str, info: dict, seconds: float, light: int) -> Tally:
    """`light` light clients for `seconds` on an event loop of their own (run in a process of its own): their
    timings then hold the server's latency and not the wait for a loop busy sending the heavy uploads."""
    mix, tally = Mix(url, info), Tally()

    async def run() -> None:
        stop = time.monotonic() + seconds
        limits = httpx.Limits(max_connections=light + 1)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=mix.hang_seconds) as client:
            await asyncio.gather(*[light_client(client, mix, tally, stop) for _ in range(light)])
    asyncio.run(run())
    return tally


async def heavy_client(client, mix: Mix, tally: Tally, stop: float, n: int) -> None:
    i = n
    while time.monotonic() < stop:
        answer: list[httpx.Response] = []
        outcome, seconds = await send(client, mix.heavy(i, stream=i % 2 == 1), answer)
        tally.add("heavy", outcome)
        if outcome == 200:
            tally.heavy_s.append(seconds)
        elif outcome == 503:  # as Retry-After asks (a well-behaved client), within what is left of the soak
            retry = answer[0].headers.get("retry-after", "1")
            await asyncio.sleep(min(float(retry) if retry.isdigit() else 1.0, max(0.0, stop - time.monotonic())))
        i += 2


async def abuse_client(client, mix: Mix, tally: Tally, stop: float, n: int) -> None:
    """Each abusive client cycles through its own kinds: n = 0 sends bodies that are refused,
    n = 1 raw-socket tricks (a lying Content-Length, a dribbled body, an early close), n = 2 and
    more slow senders that stall past the deadline."""
    k = 0
    while time.monotonic() < stop:
        if n == 0:
            kind, req = mix.abusive(k)
            outcome, _ = await send(client, req)
        elif n == 1:
            kind, outcome = await raw_trick(mix, k)
        else:
            kind, outcome = "stalled_body", await raw(mix, _head(mix.light(k), 1000), b"", pause=0)
        tally.add(kind, outcome)
        k += 1
        await asyncio.sleep(0.05)


async def raw_trick(mix: Mix, k: int) -> tuple[str, int | str]:
    method, path, body, headers = req = mix.light(k)
    limit = mix.info["limits"]["max_body_bytes"]
    which = k % 3
    if which == 0:  # says its body is over the limit, sends a little of it
        return "declared_too_large", await raw(mix, _head(req, limit + 1), b"\0" * 1024, pause=0)
    if which == 1:  # a valid light request, its body dribbled in five pieces
        return "slow_sender", await raw(mix, _head(req, len(body)), body, pause=0.2, pieces=5)
    # a valid heavy request (streamed where it can be), closed after its first bytes of answer or 0.2 s
    heavy = mix.heavy(k, stream=True)
    return "left_early", await raw(mix, _head(heavy, len(heavy[2])), heavy[2], pause=0, leave_after=0.2)


def _head(req: Request, length: int) -> bytes:
    method, path, _, headers = req
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", f"Content-Length: {length}",
             *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def raw(mix: Mix, head: bytes, body: bytes, pause: float, pieces: int = 1,
              leave_after: float | None = None) -> int | str:
    host, port = mix.url.rsplit("//", 1)[1].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head)
        step = max(1, math.ceil(len(body) / pieces)) if body else 1
        for i in range(0, len(body), step):
            writer.write(body[i:i + step])
            await writer.drain()
            await asyncio.sleep(pause)
        if leave_after is not None:
            try:
                await asyncio.wait_for(reader.read(64), leave_after)
            except asyncio.TimeoutError:
                pass
            return "left"
        try:
            line = await asyncio.wait_for(reader.readline(), mix.hang_seconds)
        except asyncio.TimeoutError:
            return "hung"
        parts = line.split()
        return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else f"lost: {line[:40]!r}"
    except (ConnectionError, OSError) as e:
        return f"lost: {type(e).__name__}"
    finally:
        writer.close()
