"""`anyformer serve` says `serving RUN at URL` only once the socket accepts: a client that connects
once, right after the line, is answered. The real command, as a separate process."""
from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

import anyformer as af
from tests.conftest import REPO
from tests.serve.conftest import free_port

pytestmark = pytest.mark.slow
START_SECONDS = 300  # load, warm-up and bind, on a busy 2-core machine


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """An untrained tiny ViT saved as a run with its data facts: what the server needs, no training."""
    run = tmp_path_factory.mktemp("ready") / "run"
    model = af.ViT.preset("vit-mnist", width=32, depth=1, heads=2, mlp_hidden=64, patch_size=7)
    model.save(run, extra={"data": {"kind": "images", "classes": [str(i) for i in range(10)], "channels": 1,
                                    "image_size": [28, 28], "mean": [0.13], "std": [0.31]}})
    return run


def start(run, port: int, *extra: str, threads: str | None = "1") -> tuple[subprocess.Popen, queue.Queue]:
    """The command, its stdout's lines arriving on a queue (a reader thread, so a test can wait with a timeout);
    `threads`: its --threads (None: the command's own default)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("ANYFORMER_DEBUG", None)
    env.pop("ANYFORMER_SERVE_TOKEN", None)
    env = {k: v for k, v in env.items() if k != "OMP_NUM_THREADS"}  # the command's own choice of threads, not ours
    server = subprocess.Popen([sys.executable, "-m", "anyformer", "serve", str(run), "--port", str(port),
                               *(["--threads", threads] if threads else []), *extra], cwd=REPO, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in server.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return server, lines


def serving_url(server: subprocess.Popen, lines: queue.Queue) -> str:
    """The URL of the `serving RUN at URL` line, the first line the command prints."""
    line = lines.get(timeout=START_SECONDS)
    assert line is not None, f"exited {server.wait()} before serving: {server.stderr.read()[-2000:]}"
    m = re.fullmatch(r"serving .+ at (http://127\.0\.0\.1:(\d+)/)\n", line)
    assert m, line
    return m[1]


def stop(server: subprocess.Popen) -> None:
    """SIGTERM, and the exit code it should give: 0."""
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=60) == 0, server.stderr.read()[-2000:]


def kill(server: subprocess.Popen) -> None:
    """After a failed check: the process ends whatever state it is in."""
    if server.poll() is None:
        server.kill()
        server.wait(timeout=60)


def test_a_client_connecting_right_after_the_line_is_answered(tiny_run):
    port = free_port()
    server, lines = start(tiny_run, port)
    try:
        url = serving_url(server, lines)
        assert url == f"http://127.0.0.1:{port}/"
        # One try, no retry, at once (a bare socket: an HTTP client takes milliseconds to set up,
        # in which a server that announced itself early may have bound after all).
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
            answer = b"".join(iter(lambda: s.recv(65536), b"")).decode()
        head, _, body = answer.partition("\r\n\r\n")
        assert head.startswith("HTTP/1.1 200 ") and json.loads(body)["ready"] is True, answer
        info = httpx.get(url + "api/info", timeout=60)
        assert info.status_code == 200 and info.json()["family"] == "vit", info.text
        stop(server)
    finally:
        kill(server)


def test_port_0_serves_on_a_free_port_which_the_line_names(tiny_run):
    server, lines = start(tiny_run, 0)
    try:
        url = serving_url(server, lines)
        assert not url.endswith(":0/")
        assert httpx.get(url + "healthz", timeout=60).status_code == 200
        stop(server)
    finally:
        kill(server)


def read_answer(s: socket.socket) -> str:
    """One HTTP/1.1 answer with a Content-Length, read whole from a kept-alive connection ('' if it was closed)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return data.decode()
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head)[1])
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return (head + b"\r\n\r\n" + body).decode()


def test_a_connection_idle_past_httpx_pool_expiry_is_still_open(tiny_run):
    """A client that comes back after 6 s (as a Retry-After of 5 asks) on its kept-alive connection is answered:
    with uvicorn's 5 s keep-alive the server had closed it, and a request sent as it closed went unanswered."""
    from anyformer.serve.server import KEEP_ALIVE_SECONDS
    assert KEEP_ALIVE_SECONDS > 6
    server, lines = start(tiny_run, 0)
    try:
        port = int(re.search(r":(\d+)/", serving_url(server, lines))[1])
        request = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            answers = []
            for wait in (0, 6):
                time.sleep(wait)
                s.sendall(request)
                answers.append(read_answer(s))
            assert all(a.startswith("HTTP/1.1 200 ") for a in answers), answers
        stop(server)
    finally:
        kill(server)


def test_the_started_server_keeps_its_loaded_objects_out_of_the_collectors_reach(tiny_run):
    """torch, the model and the app, frozen once loaded (gc.freeze): a full collection then walks only what came
    after, not every object of the process (a 70-80 ms stop of every thread, measured in docs/results.md)."""
    server, lines = start(tiny_run, 0)
    try:
        url = serving_url(server, lines)
        metrics = httpx.get(url + "metrics", timeout=60).text
        frozen = int(float(re.search(r"^anyformer_gc_frozen_objects (\S+)$", metrics, re.M)[1]))
        assert frozen > 100_000, metrics[-500:]  # torch alone brings more
        stop(server)
    finally:
        kill(server)


def test_bound_beyond_this_machine_the_server_asks_for_the_token_its_url_carries(tiny_run):
    server, lines = start(tiny_run, 0, "--host", "0.0.0.0")
    try:
        line = lines.get(timeout=START_SECONDS)
        assert line is not None, f"exited {server.wait()} before serving: {server.stderr.read()[-2000:]}"
        m = re.fullmatch(r"serving .+ at http://0\.0\.0\.0:(\d+)/\?token=([A-Za-z0-9_-]{40,})\n", line)
        assert m, line
        base, token = f"http://127.0.0.1:{m[1]}/", m[2]
        assert httpx.get(base + "healthz", timeout=60).status_code == 200
        refused = httpx.get(base + "api/info", timeout=60)
        assert refused.status_code == 401 and "Bearer" in refused.json()["error"], refused.text
        assert httpx.get(base, timeout=60).status_code == 401
        let_in = httpx.get(base + "api/info", headers={"Authorization": f"Bearer {token}"}, timeout=60)
        assert let_in.status_code == 200 and let_in.json()["family"] == "vit"
        with httpx.Client(timeout=60, follow_redirects=True) as browser:  # the printed URL, opened once
            page = browser.get(f"{base}?token={token}")
            assert page.status_code == 200 and "anyformer" in page.text and str(page.url) == base
            assert browser.get(base + "api/info").status_code == 200  # the cookie the page's scripts carry
        stop(server)
    finally:
        kill(server)


def test_a_token_too_short_is_refused_before_the_model_loads(tiny_run):
    server, lines = start(tiny_run, 0, "--host", "0.0.0.0", "--token", "hunter2")
    try:
        assert server.wait(timeout=120) == 2 and lines.get(timeout=10) is None  # nothing served
        err = server.stderr.read().strip()
        assert err == "anyformer: error: --token has 7 characters; expected at least 16 (leave it out and serve makes one)", err
    finally:
        kill(server)


def test_by_default_each_model_call_gets_its_share_of_the_cores(tiny_run):
    # the light lane's 2 calls and the heavy lane's 1 at once: a third of the cores each, at least one thread
    cores = len(os.sched_getaffinity(0))
    for extra, calls in (((), 3), (("--concurrency", "1"), 2)):
        server, lines = start(tiny_run, free_port(), *extra, threads=None)
        try:
            info = httpx.get(serving_url(server, lines) + "api/info", timeout=30).json()
            assert info["threads"] == max(1, cores // calls), info
        except BaseException:
            kill(server)
            raise
        stop(server)
