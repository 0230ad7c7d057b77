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


def start(run, port: int) -> tuple[subprocess.Popen, queue.Queue]:
    """The command, its stdout's lines arriving on a queue (a reader thread, so a test can wait with a timeout)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("ANYFORMER_DEBUG", None)
    server = subprocess.Popen([sys.executable, "-m", "anyformer", "serve", str(run), "--port", str(port),
                               "--threads", "1"], cwd=REPO, env=env, text=True,
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
