"""Runs the serve tests share: a tiny ViT trained on a real MNIST slice, a tiny character model
trained on a real slice of Tiny Shakespeare, a tiny generator and a tiny text classifier, each by the
command line (run in this process), as a user makes them; and a real uvicorn server on a free port, in
a thread."""
from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest

from tests.cli_runner import run
from tests.conftest import SHARED_DATA

pytest.importorskip("starlette", reason="the serve extra is not installed: pip install -e '.[serve]'")


def _train(*args: str, cache) -> None:
    r = run("train", *args, "--amp", "none", "--threads", "1", "--no-progress", "--no-plots",
            env_extra={"ANYFORMER_CACHE": str(cache)})
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.fixture(scope="session")
def vit_run(tmp_path_factory):
    """500 steps on 8,000 real training digits: about 70% test accuracy in ~10 s of training, enough
    to read a drawn 1, and the classes' probabilities are far from uniform."""
    out = tmp_path_factory.mktemp("serve-vit") / "run"
    _train("--data", str(SHARED_DATA / "mnist"), "--max-steps", "500", "--eval-every", "500",
           "--limit-train", "8000", "--limit-eval", "300", "--batch-size", "64", "--lr", "3e-3",
           "--warmup-steps", "10", "--augment", "none", "--set", "depth=2", "--set", "width=32",
           "--set", "heads=4", "--set", "mlp_hidden=64", "--set", "patch_size=7", "--set", "stem=patch",
           "--out", str(out), cache=out.parent / "cache")
    return out


@pytest.fixture(scope="session")
def lm_run(tmp_path_factory):
    """A tiny character model (context 128) trained for 60 steps on the first 100 kB of Tiny Shakespeare."""
    tmp = tmp_path_factory.mktemp("serve-lm")
    (tmp / "slice.txt").write_text((SHARED_DATA / "tinyshakespeare" / "input.txt").read_text()[:100_000])
    _train("shakespeare-cpu", "--data", str(tmp / "slice.txt"), "--out", str(tmp / "run"), "--max-steps", "60",
           "--eval-every", "60", "--batch-size", "8", "--lr", "3e-3", "--warmup-steps", "5",
           "--set", "width=64", "--set", "depth=2", "--set", "heads=4", cache=tmp / "cache")
    return tmp / "run"


@pytest.fixture(scope="session")
def dit_run(tmp_path_factory):
    """A tiny flow-matching generator (one block, 7x7 patches) trained for 20 steps on real digits:
    enough to be a real run directory whose samples the page serves."""
    out = tmp_path_factory.mktemp("serve-dit") / "run"
    _train("mnist-gen", "--data", str(SHARED_DATA / "mnist"), "--max-steps", "20", "--eval-every", "20",
           "--limit-train", "2000", "--limit-eval", "100", "--batch-size", "32", "--warmup-steps", "2",
           "--set", "width=32", "--set", "depth=1", "--set", "heads=2", "--set", "mlp_hidden=64",
           "--set", "patch_size=7", "--out", str(out), cache=out.parent / "cache")
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def live_server(app):
    """The app on a real uvicorn server (HTTP/1.1, chunked streaming) in a thread; yields its base URL."""
    import uvicorn
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def series_run(tmp_path_factory):
    """A small series model trained for 60 steps on BasicMotions (6 channels, 4 classes, shipped with aeon)."""
    pytest.importorskip("aeon", reason="the series extra is not installed: pip install -e '.[series]'")
    out = tmp_path_factory.mktemp("serve-series") / "run"
    _train("series", "--data", "BasicMotions", "--max-steps", "60", "--eval-every", "60", "--set", "width=32",
           "--set", "depth=2", "--set", "mlp_hidden=64", "--out", str(out), cache=out.parent / "cache")
    return out


@pytest.fixture(scope="session")
def text_run(tmp_path_factory):
    """A text classifier trained from scratch for 8 steps on three topics' texts (the MiniLM weights
    package stood in as missing, so that the run needs no download)."""
    from anyformer.cli import main
    from anyformer.train import textclass
    from tests.train.test_text_classify import texts
    root = tmp_path_factory.mktemp("texts")
    texts().to_csv(root / "t.csv", index=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(textclass, "minilm_available", lambda: False)
        assert main(["train", "--data", str(root / "t.csv"), "--out", str(root / "run"), "--max-steps", "8",
                     "--plan", "stock", "--no-progress", "--no-plots"]) == 0
    return root / "run"
