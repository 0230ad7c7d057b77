"""Soak test of `anyformer serve`: light, heavy, malformed and abusive clients at once, then SIGTERM.

Starts the real command (`python -m anyformer serve RUN`) on a free port of 127.0.0.1, then:
1. idle: the light clients alone for --idle-seconds (light latency without heavy work);
2. load: for --seconds, the same light clients, plus heavy clients (valid requests near the cost
   budget: the most tokens, samples x steps or pixels allowed) and abusive ones (malformed and
   oversized bodies, bodies of the wrong type, over-budget requests, slow senders, senders that
   stall past the deadline, clients that leave mid-stream or before their answer);
3. still serving: a light request and /healthz answered after the load;
4. SIGTERM mid-load: light and heavy requests in flight, SIGTERM, then every one must be answered
   (200 or 503) and the server must exit 0.
The light clients run in a process of their own, on an event loop of their own (--light-in-loop: on the
others'), so that their timings hold the server's latency and not waits for a loop busy sending uploads.
Prints a table: requests sent, answered by status, none lost or hung, light p50/p99 (and the tail past
it) idle and under load, server RSS before and after; writes benchmarks/results/<processor>/serve_soak.md.

    python benchmarks/soak_serve.py RUN [--seconds 60] [--idle-seconds 15] [--light 4] [--heavy 2]
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import httpx

from bench_common import ROOT, load_average, machine, write_results
from soak_clients import Mix, Tally, abuse_client, heavy_client, light_alone, light_client, quantile


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_server(run: str, port: int, extra: list[str]) -> tuple[subprocess.Popen, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "anyformer", "serve", run, "--port", str(port), *extra],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return server, time.perf_counter() - started
        except httpx.TransportError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the server did not start: {server.stderr.read()[-2000:]}")
        time.sleep(0.2)


async def phase(mix: Mix, seconds: float, light: int, heavy: int, abuse: int,
                rss: tuple[int, list[float]] | None = None, apart: ProcessPoolExecutor | None = None) -> Tally:
    """The clients for `seconds`; with `rss` (pid, list), the server's RSS is sampled into the list
    every second, to tell a plateau (the allocator's high-water mark) from a leak. With `apart`, the light
    clients run in that pool's process, on an event loop of their own (`light_alone`)."""
    tally = Tally()
    stop = time.monotonic() + seconds
    light_apart = (asyncio.get_running_loop().run_in_executor(apart, light_alone, mix.url, mix.info, seconds, light)
                   if apart is not None else None)
    light_here = 0 if apart is not None else light

    async def sample_rss() -> None:
        while rss is not None and time.monotonic() < stop:
            rss[1].append(rss_mb(rss[0]))
            await asyncio.sleep(1)
    limits = httpx.Limits(max_connections=light + heavy + abuse + 4)
    async with httpx.AsyncClient(base_url=mix.url, limits=limits, timeout=mix.hang_seconds) as client:
        await asyncio.gather(*[light_client(client, mix, tally, stop) for _ in range(light_here)],
                             *[heavy_client(client, mix, tally, stop, i) for i in range(heavy)],
                             *[abuse_client(client, mix, tally, stop, i) for i in range(abuse)], sample_rss())
    if light_apart is not None:
        tally.merge(await light_apart)
    return tally


async def sigterm_mid_load(mix: Mix, server: subprocess.Popen, in_flight: int) -> dict:
    """`in_flight` requests (half light, half heavy) sent, SIGTERM once they are under way, each
    answer recorded; then the exit code."""
    async with httpx.AsyncClient(base_url=mix.url, timeout=mix.hang_seconds) as client:
        async def one(i: int):
            method, path, body, headers = mix.heavy(i) if i % 2 else mix.light(i)
            try:
                r = await client.request(method, path, content=body, headers=headers)
                return r.status_code
            except httpx.HTTPError as e:
                return f"no answer ({type(e).__name__})"
        tasks = [asyncio.create_task(one(i)) for i in range(in_flight)]
        await asyncio.sleep(0.5)  # all sent, the heavy ones at work
        server.send_signal(signal.SIGTERM)
        sent_at = time.perf_counter()
        answers = await asyncio.gather(*tasks)
    try:
        code = await asyncio.to_thread(server.wait, 60)
    except subprocess.TimeoutExpired:
        server.kill()
        code = "did not exit within 60 s"
    return {"answers": collections.Counter(answers), "exit": code,
            "exit_seconds": round(time.perf_counter() - sent_at, 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="a run directory (an image classifier, a language model or a generator)")
    p.add_argument("--seconds", type=float, default=60, help="the load phase")
    p.add_argument("--idle-seconds", type=float, default=15, help="the light clients alone, before the load")
    p.add_argument("--light", type=int, default=4, help="light clients, each one request at a time")
    p.add_argument("--heavy", type=int, default=2, help="heavy clients")
    p.add_argument("--abuse", type=int, default=3, help="abusive clients (malformed, oversized, slow, leaving)")
    p.add_argument("--sigterm-requests", type=int, default=8, help="requests in flight when SIGTERM comes")
    p.add_argument("--server-args", default="", help="extra `anyformer serve` flags (default: none, the server as a "
                                                     "user starts it; before 2026-12-05 the default was --threads 1)")
    p.add_argument("--light-in-loop", action="store_true",
                   help="the light clients on the heavy and abusive ones' event loop (before 2026-12-04: their "
                        "timings then include waits for that loop), not in a process of their own")
    p.add_argument("--no-write", action="store_true")
    a = p.parse_args()

    port = free_port()
    server, start_seconds = start_server(a.run, port, a.server_args.split())
    url = f"http://127.0.0.1:{port}"
    load_before = load_average()
    # The light clients' own process: started (its imports done) in the untimed warm-up phase below.
    apart = None if a.light_in_loop else ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    try:
        mix = Mix.for_server(url)
        asyncio.run(phase(mix, 2, a.light, 0, 0, apart=apart))  # first connections, allocator warm-up
        rss_before = rss_mb(server.pid)
        idle = asyncio.run(phase(mix, a.idle_seconds, a.light, 0, 0, apart=apart))
        mix.warm()  # the clients' bodies made now, not in the middle of the timing
        rss_during: list[float] = []
        loaded = asyncio.run(phase(mix, a.seconds, a.light, a.heavy, a.abuse, (server.pid, rss_during), apart))
        method, path, body, headers = mix.light(0)
        after = httpx.request(method, url + path, content=body, headers=headers, timeout=60)
        health = httpx.get(url + "/healthz", timeout=10)
        still_serving = after.status_code == 200 and health.status_code == 200
        rss_after = rss_mb(server.pid)
        metrics_text = httpx.get(url + "/metrics", timeout=10).text
        term = asyncio.run(sigterm_mid_load(mix, server, a.sigterm_requests))
    finally:
        if apart is not None:
            apart.shutdown()
        if server.poll() is None:
            server.kill()
            server.wait()
    load_after = load_average()

    lost = loaded.lost + idle.lost
    term_lost = sum(n for k, n in term["answers"].items() if not isinstance(k, int))

    def tail(ms: list[float]) -> str:  # past p99 too: a stop of every thread (a full garbage collection) shows there
        return (f"{quantile(ms, 0.5):.1f} / {quantile(ms, 0.99):.1f} / {quantile(ms, 0.999):.1f} / "
                f"{max(ms, default=0.0):.1f} ({len(ms)})")

    i50, i99 = quantile(idle.light_ms, 0.5), quantile(idle.light_ms, 0.99)
    l50, l99 = quantile(loaded.light_ms, 0.5), quantile(loaded.light_ms, 0.99)
    rows = [("requests sent (load phase)", loaded.sent),
            ("answered, by status", ", ".join(f"{s}: {n}" for s, n in sorted(loaded.status.items()))),
            ("left by design (client closed first)", loaded.left),
            ("lost (no answer) / hung (none within "f"{mix.hang_seconds:g} s)", f"{lost} / {loaded.hung + idle.hung}"),
            # a kind's outcomes are statuses (ints) and words ("left"): sorted as text (ints and strings don't compare)
            ("by kind", "; ".join(f"{k}: {dict(sorted(v.items(), key=lambda kv: str(kv[0])))}"
                                  for k, v in sorted(loaded.kinds.items()))),
            ("light ms idle (p50 / p99 / p99.9 / max, n)", tail(idle.light_ms)),
            ("light ms under load (p50 / p99 / p99.9 / max, n)", tail(loaded.light_ms)),
            ("light p99 loaded / idle", f"{l99 / i99:.2f}x (target: at most 1.5x, with twice the heavy clients)"),
            ("heavy answered 200 (s, p50 / max)", f"{len(loaded.heavy_s)}: {quantile(loaded.heavy_s, 0.5):.2f} / "
                                                  f"{max(loaded.heavy_s, default=0):.2f}"),
            ("server RSS MB: idle / load 1st quarter / load end / after",
             f"{rss_before:.0f} / {rss_during[len(rss_during) // 4]:.0f} / {rss_during[-1]:.0f} / {rss_after:.0f}"),
            ("still serving at the end", f"{still_serving} (light {after.status_code}, healthz {health.status_code})"),
            ("SIGTERM mid-load: answers", f"{dict(term['answers'])} of {a.sigterm_requests} in flight"),
            ("SIGTERM: exit code, seconds", f"{term['exit']}, {term['exit_seconds']}")]
    width = max(len(k) for k, _ in rows)
    table = "\n".join(f"| {k.ljust(width)} | {v} |" for k, v in rows)
    print(table)
    ok = (lost == 0 and loaded.hung == 0 and still_serving and term_lost == 0 and term["exit"] == 0)
    print("PASS" if ok else "FAIL", flush=True)
    if not a.no_write:
        info = mix.info
        command = " ".join(["anyformer serve", *a.server_args.split()])
        facts = {**machine(), "run": f"{a.run} ({info['family']}, {info.get('task')})",
                 "server": f"{command} (ready after {start_seconds:.1f} s: load, warm-up; "
                           f"{info.get('threads', '?')} torch threads a call)",
                 "limits": json.dumps(info["limits"]), "measured at warm-up (s)": json.dumps(info["measured_seconds"]),
                 "clients": f"{a.light} light, {a.heavy} heavy, {a.abuse} abusive; {a.seconds:g} s of load after "
                            f"{a.idle_seconds:g} s of light alone; the light clients "
                            + ("on the others' event loop" if a.light_in_loop else "in a process of their own"),
                 "requests": mix.describe(),
                 "load average (1, 5, 15 min) before": load_before, "after": load_after}
        write_results(ROOT / "benchmarks" / "results" / f"serve_soak_{info['family']}.md",
                      "Soak test of `anyformer serve`",
                      f"Produced by `python benchmarks/soak_serve.py {' '.join(sys.argv[1:])}` against the real "
                      f"server on this machine (client and server share its cores).",
                      facts, [("Result", "| what | figure |\n|---|---|\n" + table + f"\n\n{'PASS' if ok else 'FAIL'}"),
                              ("/metrics at the end of the load", "```\n" + metrics_text + "```")])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
