"""Load test of `anyformer serve`: many concurrent POST /api/predict against the real server.

Starts `python -m anyformer serve RUN` on a free port (the real command, uvicorn and all), then
fires N requests (default 200) from an asyncio client with at most C in flight (default 50), each
a different real MNIST test digit as a PNG. Checks that every request got a 200 with three classes
(no error, none lost), and reports latency p50/p95/max and throughput, with the processor and the
date, in benchmarks/results/<processor>/serve_load.md.

    python benchmarks/load_serve.py RUN [--requests 200] [--concurrency 50] [--server-threads 1]
"""
from __future__ import annotations

import argparse
import asyncio
import io
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
from PIL import Image

from bench_common import ROOT, load_average, machine, write_results


def digits(n: int, data: Path) -> tuple[list[bytes], list[int]]:
    from anyformer.data import load_image_dataset
    ds = load_image_dataset(str(data), "test")
    images, labels = ds.images[:n].numpy(), ds.labels[:n].tolist()
    out = []
    for im in images:
        buf = io.BytesIO()
        Image.fromarray(im[0]).save(buf, format="PNG")
        out.append(buf.getvalue())
    return out, labels


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def fire(url: str, bodies: list[bytes], concurrency: int) -> tuple[list[float], list[httpx.Response | Exception], float]:
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = [0.0] * len(bodies)
    answers: list[httpx.Response | Exception] = [None] * len(bodies)  # type: ignore[list-item]
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        async def one(i: int) -> None:
            async with gate:
                t = time.perf_counter()
                try:
                    answers[i] = await client.post("/api/predict", content=bodies[i],
                                                   headers={"content-type": "image/png"})
                except Exception as e:  # noqa: BLE001 - counted as a failure below
                    answers[i] = e
                latencies[i] = time.perf_counter() - t
        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(len(bodies))))
        wall = time.perf_counter() - start
    return latencies, answers, wall


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="an image classifier run directory")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=50, help="requests in flight at once, client side")
    p.add_argument("--server-concurrency", type=int, default=2, help="the server's --concurrency (model calls at once)")
    p.add_argument("--server-threads", type=int, default=1, help="the server's --threads (torch threads)")
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "mnist"))
    p.add_argument("--no-write", action="store_true")
    a = p.parse_args()

    bodies, labels = digits(a.requests, Path(a.data))
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(a.server_threads)}
    server = subprocess.Popen([sys.executable, "-m", "anyformer", "serve", a.run, "--port", str(port),
                               "--threads", str(a.server_threads), "--concurrency", str(a.server_concurrency)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/api/info", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start: {server.stderr.read()[-2000:]}")
            time.sleep(0.2)
        load_before = load_average()
        asyncio.run(fire(url, bodies[:10], 10))  # warm-up: first-call allocations, thread pool start
        latencies, answers, wall = asyncio.run(fire(url, bodies, a.concurrency))
        load_after = load_average()
    finally:
        server.terminate()
        server.wait(timeout=30)

    ok = [r for r in answers if isinstance(r, httpx.Response) and r.status_code == 200 and len(r.json()["top"]) == 3]
    failed = [r if isinstance(r, Exception) else f"HTTP {r.status_code}" for r in answers if r not in ok]
    right = sum(int(r.json()["top"][0]["class"]) == y for r, y in zip(answers, labels) if r in ok)
    ms = sorted(1000 * t for t in latencies)
    p50, p95 = statistics.median(ms), ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
    lines = [f"requests: {a.requests}, in flight at most {a.concurrency}; answered 200 with 3 classes: {len(ok)}; "
             f"failed or lost: {len(failed)}",
             f"latency ms: p50 {p50:.1f}, p95 {p95:.1f}, max {ms[-1]:.1f}, min {ms[0]:.1f}",
             f"throughput: {a.requests / wall:.1f} requests/s ({wall:.2f} s wall)",
             f"top class equals the label: {right}/{len(ok)}"]
    print("\n".join(lines))
    if failed:
        print(f"failures: {failed[:5]}", file=sys.stderr)
    if not a.no_write:
        import json
        summary = json.loads((Path(a.run) / "summary.json").read_text()) if (Path(a.run) / "summary.json").is_file() else {}
        model = f"{summary.get('model', '?')}, {summary.get('params', '?')} parameters, test accuracy {summary.get('test_accuracy', '?')}"
        facts = {**machine(), "run": f"{a.run} ({model})", "server": f"anyformer serve --threads {a.server_threads} "
                                                      f"--concurrency {a.server_concurrency}",
                 "load average (1, 5, 15 min) before": load_before, "after": load_after}
        write_results(ROOT / "benchmarks" / "results" / "serve_load.md", "Load test of `anyformer serve`",
                      f"Produced by `python benchmarks/load_serve.py {' '.join(sys.argv[1:])}`: "
                      f"{a.requests} POST /api/predict (each a different real MNIST test digit as a PNG, "
                      f"top-3 classes plus the attention rollout PNG in every answer), at most {a.concurrency} "
                      f"in flight, against the real server on this machine (client and server share its cores).",
                      facts, [("Result", "\n".join(f"- {l}" for l in lines))])
    return 1 if failed or len(ok) != a.requests else 0


if __name__ == "__main__":
    sys.exit(main())
