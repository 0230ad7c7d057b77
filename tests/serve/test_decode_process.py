"""Large uploads are decoded by a process of their own at the lowest CPU priority
(anyformer/data/images/decode_process.py): the same pixels as the server's own decoding, a bad picture
the same one-line refusal, a decoder that dies answered and started again, and the process gone when
the server stops."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

import anyformer as af
from anyformer.data.images import decode_process
from anyformer.data.images.decode_process import NICE, PictureDecoder
from anyformer.data.images.preprocess import ImagePreprocess
from anyformer.models import read_config
from tests.conftest import REPO

from starlette.testclient import TestClient  # noqa: E402  (after conftest's importorskip)

from anyformer.serve import Limits, create_app  # noqa: E402
from anyformer.serve.classify import HEAVY_PIXELS, HEAVY_SHARE  # noqa: E402
from anyformer.serve.limits import HEAVY_SHARE as HEAVY_SHARE_DEFAULT  # noqa: E402


def large_one(side: int = 1400) -> bytes:
    """A drawn 1 on a picture of more than HEAVY_PIXELS pixels."""
    im = Image.new("L", (side, side))
    ImageDraw.Draw(im).line([(side * 0.52, side * 0.18), (side * 0.48, side * 0.82)], fill=255, width=side // 12)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    assert side * side > HEAVY_PIXELS
    return buf.getvalue()


@pytest.mark.slow
def test_a_large_upload_is_decoded_at_low_priority_and_answered_as_the_run_itself_reads_it(vit_run):
    data = large_one()
    limits = Limits(max_body_bytes=2_000_000, max_pixels=4_000_000)
    app = create_app(str(vit_run), limits)
    with TestClient(app, raise_server_exceptions=False) as client:  # `with`: the server's start and stop
        decoder = next(h for h in app.state.context.background if isinstance(h, PictureDecoder))
        # The image classifier's own heavy share (its uploads' decoding is short), where none is asked for.
        assert client.get("/api/info").json()["limits"]["heavy_share"] == HEAVY_SHARE == 0.2
        assert app.state.context.worker.lanes["heavy"].share == HEAVY_SHARE
        assert decoder.pid is not None  # started with the server, not by the first large picture
        r = client.post("/api/predict", content=data, headers={"content-type": "image/png"})
        assert r.status_code == 200, r.text
        child = decoder.pid
        assert os.getpriority(os.PRIO_PROCESS, child) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + NICE)
        broken = client.post("/api/predict", content=data[: len(data) // 2], headers={"content-type": "image/png"})
        assert broken.status_code == 400 and broken.json()["error"].startswith("cannot decode the upload")
        assert client.post("/api/predict", content=data, headers={"content-type": "image/png"}).json() == r.json()
    assert decoder.pid is None and not _alive(child)  # stopped with the server
    info = read_config(vit_run)["data"]
    pre = ImagePreprocess.from_info(info)
    model = af.load(vit_run).eval()
    with torch.no_grad():
        probs = model(pre(pre.load(io.BytesIO(data)))[None]).softmax(-1)[0]
    got = r.json()["top"]
    assert [t["index"] for t in got] == probs.topk(3).indices.tolist()
    np.testing.assert_allclose([t["probability"] for t in got], probs.topk(3).values.numpy(), atol=2e-6)


@pytest.mark.slow
def test_a_heavy_share_asked_for_is_the_one_served(vit_run, lm_run):
    asked = create_app(str(vit_run), Limits(heavy_share=0.7)).state.context.worker.lanes["heavy"]
    generation = create_app(str(lm_run), Limits()).state.context.worker.lanes["heavy"]
    assert asked.share == 0.7 and generation.share == HEAVY_SHARE_DEFAULT == 0.25


@pytest.mark.slow
def test_the_child_gives_the_pixels_and_warning_of_the_servers_own_decoding(vit_run):
    pre = ImagePreprocess.from_info(read_config(vit_run)["data"])
    decoder = PictureDecoder(pre)
    try:
        for picture in (large_one(1100), _blank(1200)):
            x, warning, _ = decoder.decode(picture)
            y, expected = pre.load_checked(io.BytesIO(picture))
            assert torch.equal(x, y) and x.dtype == torch.uint8 and warning == expected
        assert isinstance(warning, str) and warning  # the blank page's warning came through the pipe
        with pytest.raises(ValueError) as ours:
            pre.load_checked(io.BytesIO(b"not a picture"))
        with pytest.raises(ValueError, match=re.escape(str(ours.value))):
            decoder.decode(b"not a picture")
    finally:
        decoder.close()


@pytest.mark.slow
def test_a_decoder_that_dies_on_a_picture_is_a_clear_error_and_the_next_picture_gets_a_new_one(monkeypatch):
    # A "preprocess" whose reading ends its process (sys.exit, as a crash in a decoding library would):
    # the caller gets a ValueError naming the exit, and the next call runs in a fresh child. The child runs at
    # nice 19, and under the suite's other workers its exit (torch unloading) once took over the 10 s it is
    # given; what is checked here is the message and the fresh child, not that wait, so it is made generous.
    monkeypatch.setattr(decode_process, "EXIT_WAIT_S", 120.0)
    dying = PictureDecoder(types.SimpleNamespace(load_checked=sys.exit))
    try:
        pids = []
        for _ in range(2):
            dying.start()
            pids.append(dying.pid)
            with pytest.raises(ValueError, match=r"decoder stopped while reading it \(exit code 1\)"):
                dying.decode(b"anything")
            assert dying.pid is None
        assert None not in pids and pids[0] != pids[1]
    finally:
        dying.close()


def _blank(side: int) -> bytes:
    buf = io.BytesIO()
    Image.new("L", (side, side), 255).save(buf, format="PNG")
    return buf.getvalue()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # no signal sent: only whether the process exists (it was reaped when stopped)
    except ProcessLookupError:
        return False
    return True


# A server as the CLI starts it: configure() before torch, OpenMP pinning its main thread to core 0 when torch
# loads; the decoder it starts, which inherits that pin and imports torch itself, must run on every core.
PINNED_SERVER = """
import json, os
import anyformer.runtime as r
r.configure()
import torch
torch.ones(64, 64) @ torch.ones(64, 64)
from anyformer.data.images.decode_process import PictureDecoder
from anyformer.data.images.preprocess import ImagePreprocess
decoder = PictureDecoder(ImagePreprocess([0.5], [0.5], 1, 28))
try:
    decoder.decode(b"not a picture")  # a round trip: the child is past its setup
except ValueError:
    pass
print(json.dumps({"main": sorted(os.sched_getaffinity(0)), "child": sorted(os.sched_getaffinity(decoder.pid))}))
decoder.close()
"""


@pytest.mark.slow
def test_the_decoder_of_a_pinned_server_runs_on_every_core_it_had():
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
    out = subprocess.run([sys.executable, "-c", PINNED_SERVER], capture_output=True, text=True, check=True,
                         cwd=REPO, env=env).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) > 1:  # on one core there is nothing to pin or give back
        assert len(seen["main"]) == 1  # the server itself is pinned, as the CLI makes it
    assert seen["child"] == cores
