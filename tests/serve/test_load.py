"""The server under load and abuse, request by request: the cost budget, the bounded lanes, the
deadline, a client that leaves, /metrics and the drain. The soak and SIGTERM through the real
command are in test_soak.py."""
from __future__ import annotations

import dataclasses
import math
import re
import time

import httpx
import pytest

from tests.serve.conftest import live_server
from tests.serve.test_api import drawn_one

from starlette.testclient import TestClient  # noqa: E402  (after conftest's importorskip)

from anyformer.serve import Limits, create_app  # noqa: E402
from anyformer.serve.context import LIGHT_SECONDS  # noqa: E402
from anyformer.serve.sample import work_seconds  # noqa: E402

HEAVY = {"class": 3, "n": 16, "steps": 1000, "cfg": 2.0, "seed": 0}   # the most the sample API takes
LIGHT = {"class": 3, "n": 1, "steps": 1, "seed": 0}
SAMPLE_LINE = re.compile(r'^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?[0-9.e+-]+$')


def metrics(client) -> dict[str, float]:
    """GET /metrics parsed: {'name{labels}': value}, every line checked against the text format."""
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out = {}
    for line in r.text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-z_]+ ", line), line
            continue
        assert SAMPLE_LINE.match(line), line
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


@pytest.fixture(scope="module")
def dit_app(dit_run):
    return create_app(str(dit_run), Limits(max_work_seconds=1000))


@pytest.mark.slow
def test_a_request_over_the_cost_budget_is_refused_before_any_work(dit_run, lm_run):
    app = create_app(str(dit_run))
    ctx = app.state.context
    # A budget between the light request's estimate and the heavy one's (some 4,000 times more),
    # from the step time this machine measured at warm-up, whatever its speed or load.
    light, heavy = work_seconds(ctx, 1, 1, 1.0), work_seconds(ctx, 16, 1000, 2.0)
    assert heavy > 1000 * light
    ctx.limits = dataclasses.replace(ctx.limits, max_work_seconds=30 * light)
    client = TestClient(app)
    r = client.post("/api/sample", json=HEAVY)
    assert r.status_code == 422 and "--max-work-seconds" in r.json()["error"], r.text
    assert r.json()["error"].count("\n") == 0 and "16 samples x 1000 steps" in r.json()["error"]
    assert client.post("/api/sample", json=LIGHT).status_code == 200
    seen = metrics(client)
    assert seen['anyformer_refusals_total{reason="cost"}'] == 1
    assert seen['anyformer_requests_total{route="/api/sample",status="422"}'] == 1

    # The refusal says how much fits, and that much is served.
    lm_app = create_app(str(lm_run))
    lm_app.state.context.limits = dataclasses.replace(lm_app.state.context.limits,
                                                     max_work_seconds=100 * lm_app.state.context.costs["token"])
    lm = TestClient(lm_app)
    r = lm.post("/api/generate", json={"prompt": "ROMEO:", "max_new_tokens": 1000})
    assert r.status_code == 422, r.text
    most = int(re.search(r"ask for at most (\d+) max_new_tokens", r.json()["error"]).group(1))
    ok = lm.post("/api/generate", json={"prompt": "ROMEO:", "max_new_tokens": most, "temperature": 0})
    assert ok.status_code == 200 and ok.json()["tokens"] == most
    assert lm.post("/api/generate", json={"prompt": "ROMEO:", "max_new_tokens": most + 1}).status_code == 422


@pytest.mark.slow
def test_one_image_per_upload(vit_run):
    client = TestClient(create_app(str(vit_run)))
    two = [("a", ("a.png", drawn_one(), "image/png")), ("b", ("b.png", drawn_one(), "image/png"))]
    r = client.post("/api/predict", files=two)
    assert r.status_code == 413 and "one image per upload" in r.json()["error"], r.text


@pytest.mark.slow
def test_a_full_lane_answers_503_with_retry_after_and_the_other_lane_goes_on(dit_app):
    client = TestClient(dit_app)
    lane = dit_app.state.context.worker.lanes["heavy"]
    held = [lane.admit() for _ in range(lane.concurrency + lane.queue)]  # the heavy lane, full
    try:
        r = client.post("/api/sample", json=HEAVY)
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1, r.text
        assert "--queue" in r.json()["error"] and "heavy lane" in r.json()["error"]
        assert client.post("/api/sample", json=LIGHT).status_code == 200  # light work has its own lane
        assert metrics(client)['anyformer_queue_depth{lane="heavy"}'] == lane.concurrency + lane.queue
    finally:
        for release in held:
            release()
    seen = metrics(client)
    assert seen['anyformer_refusals_total{reason="queue_full_heavy"}'] >= 1
    assert seen['anyformer_queue_depth{lane="heavy"}'] == 0


@pytest.mark.slow
def test_a_heavy_request_its_lane_would_finish_past_the_deadline_is_refused_before_any_work(dit_app, monkeypatch):
    """The guard gives the lanes each request's deadline, the section its estimated cost: a sample request whose
    own estimate (thousands of passes, stretched by the turns it takes) passes a 4 s deadline is refused at once,
    not stopped after 4 s; with a request of 5 s (as if measured) in the lane, so is a small one."""
    client = TestClient(dit_app)
    lane = dit_app.state.context.worker.lanes["heavy"]
    monkeypatch.setattr(dit_app.state.guard, "deadline_seconds", 4.0)
    assert work_seconds(dit_app.state.context, 16, 1000, 2.0) / lane.share > 4.0
    started = time.perf_counter()
    r = client.post("/api/sample", json=HEAVY)
    assert time.perf_counter() - started < 2
    assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1, r.text
    assert "--deadline-seconds" in r.json()["error"] and "heavy lane" in r.json()["error"], r.text

    steps = math.ceil(0.2 / work_seconds(dit_app.state.context, 1, 1, 2.0))  # about 0.2 s: heavy, not light
    small = {**HEAVY, "n": 1, "steps": steps}
    assert LIGHT_SECONDS < work_seconds(dit_app.state.context, 1, steps, 2.0) < 0.5  # alone it fits: 1 s or less
    release = lane.admit(cost=5.0 * lane.share)  # a request expected to hold the lane's place 5 s
    try:
        r = client.post("/api/sample", json=small)
    finally:
        release()
    assert r.status_code == 503 and "--deadline-seconds" in r.json()["error"], r.text
    assert client.post("/api/sample", json=LIGHT).status_code == 200  # the light lane's own requests are short
    assert metrics(client)['anyformer_refusals_total{reason="past_deadline_heavy"}'] == 2


@pytest.mark.slow
def test_the_deadline_stops_the_work_and_answers_504(dit_app, monkeypatch):
    app = dit_app
    monkeypatch.setattr(app.state.guard, "deadline_seconds", 0.5)
    # The lane expects the request to be quick (as if its recent ones had been, against their estimates), so it
    # lets it in: an estimate can be wrong, and the deadline stops the work all the same.
    monkeypatch.setattr(app.state.context.worker.lanes["heavy"], "pace", 1e-9)
    client = TestClient(app)
    started = time.perf_counter()
    r = client.post("/api/sample", json=HEAVY)
    took = time.perf_counter() - started
    monkeypatch.undo()
    assert r.status_code == 504 and "--deadline-seconds" in r.json()["error"], r.text
    assert took < 3, took  # stopped at a step, not run to the end (several seconds of passes)
    assert app.state.context.worker.depth()["heavy"] == {"waiting": 0, "running": 0}  # nothing left running
    assert metrics(client)['anyformer_refusals_total{reason="deadline"}'] >= 1
    assert client.post("/api/sample", json=LIGHT).status_code == 200


@pytest.mark.slow
def test_a_client_that_leaves_stops_its_sampling(dit_app):
    with live_server(dit_app) as url:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + "/api/sample", json=HEAVY, timeout=0.5)  # gives up, closes the connection
        left = time.perf_counter()
        while True:
            seen = metrics(httpx.Client(base_url=url))
            if seen.get('anyformer_refusals_total{reason="client_gone"}') == 1:
                break
            assert time.perf_counter() - left < 2, "the sampling went on after its client left"
            time.sleep(0.05)
        assert seen['anyformer_running{lane="heavy"}'] == 0
        assert httpx.post(url + "/api/sample", json=LIGHT, timeout=30).status_code == 200


@pytest.mark.slow
def test_metrics_count_requests_refusals_and_latency(vit_run):
    client = TestClient(create_app(str(vit_run)))
    for _ in range(3):
        assert client.post("/api/predict", content=drawn_one(), headers={"content-type": "image/png"}).status_code == 200
    assert client.post("/api/predict", content=b"x", headers={"content-type": "text/plain"}).status_code == 415
    assert client.get("/nothing/here").status_code == 404
    seen = metrics(client)
    assert seen['anyformer_requests_total{route="/api/predict",status="200"}'] == 3
    assert seen['anyformer_requests_total{route="/api/predict",status="415"}'] == 1
    assert seen['anyformer_requests_total{route="other",status="404"}'] == 1
    assert seen['anyformer_refusals_total{reason="media_type"}'] == 1
    assert seen['anyformer_refusals_total{reason="no_route"}'] == 1
    assert seen['anyformer_request_seconds_count{route="/api/predict"}'] == 4
    p50, p99 = (seen[f'anyformer_request_seconds{{route="/api/predict",quantile="{q}"}}'] for q in ("0.5", "0.99"))
    assert 0 < p50 <= p99 < 30
    assert seen['anyformer_queue_depth{lane="light"}'] == 0 and seen["anyformer_ready"] == 1


@pytest.mark.slow
def test_while_draining_every_request_is_answered_503_and_healthz_says_not_ready(vit_run):
    app = create_app(str(vit_run))
    client = TestClient(app)
    assert client.get("/healthz").json()["ready"] is True
    app.state.guard.drain()
    health = client.get("/healthz")
    assert health.status_code == 503 and health.json()["ready"] is False
    r = client.post("/api/predict", content=drawn_one(), headers={"content-type": "image/png"})
    assert r.status_code == 503 and r.headers["retry-after"] == "1" and "shutting down" in r.json()["error"]
    seen = metrics(client)
    assert seen["anyformer_ready"] == 0 and seen['anyformer_refusals_total{reason="shutting_down"}'] == 1


@pytest.mark.slow
def test_the_warm_up_settles_the_decode_step_for_every_cache_size(lm_run, monkeypatch):
    """Whether a generation's one-token step runs compiled (and the compile itself) is decided before
    the server listens, for each cache size a request may use (64 and the context, 128, here), so no
    request ever waits for a compile: left to the requests, one came mid-soak and stalled every
    request in flight past its deadline."""
    from anyformer.serve import generate
    asked = []
    monkeypatch.setattr(generate, "prepare_decode", lambda model, batch, total: asked.append((batch, total)) or False)
    create_app(str(lm_run))
    assert asked == [(1, 64), (1, 128)]
