"""The JSON API through Starlette's TestClient (the app itself), and streaming through a real
uvicorn server: answers equal the model's own, every refusal is one 4xx JSON line, and the
server answers the next request after each."""
from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw, ImageOps

import anyformer as af
from anyformer import plan
from anyformer.data.images.preprocess import ImagePreprocess
from anyformer.data.text.tokenizers import tokenizer_from_info
from anyformer.models import read_config
from tests.serve.conftest import live_server

from starlette.testclient import TestClient  # noqa: E402  (after conftest's importorskip)

from anyformer.serve import Limits, create_app  # noqa: E402


def png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def drawn_one() -> bytes:
    im = Image.new("L", (280, 280))
    ImageDraw.Draw(im).line([(146, 50), (134, 230)], fill=255, width=22)
    return png(im)


@pytest.fixture(scope="module")
def vit_client(vit_run):
    limits = Limits(max_body_bytes=200_000, max_pixels=1_000_000)
    return TestClient(create_app(str(vit_run), limits), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def lm_client(lm_run):
    return TestClient(create_app(str(lm_run), Limits(max_prompt_chars=300, max_new_tokens=100)),
                      raise_server_exceptions=False)


def still_serving(client: TestClient) -> None:
    r = client.get("/api/info")
    assert r.status_code == 200 and r.json()["family"] in ("vit", "gpt")


@pytest.mark.slow
def test_predict_answers_what_the_model_computes(vit_run, vit_client, tmp_path):
    data = drawn_one()
    r = vit_client.post("/api/predict", content=data, headers={"content-type": "image/png"})
    assert r.status_code == 200, r.text
    got = r.json()
    # The same numbers, computed here from the run the way `anyformer predict` does.
    (tmp_path / "one.png").write_bytes(data)
    model, info = af.load(vit_run).eval(), read_config(vit_run)["data"]
    pre = ImagePreprocess.from_info(info)
    with torch.no_grad():
        probs = model(pre(pre.load(tmp_path / "one.png"))[None]).softmax(-1)[0]
    top = probs.topk(3)
    assert [t["index"] for t in got["top"]] == top.indices.tolist()
    assert [t["class"] for t in got["top"]] == [info["classes"][i] for i in top.indices.tolist()]
    np.testing.assert_allclose([t["probability"] for t in got["top"]], top.values.numpy(), atol=2e-6)
    assert got["top"][0]["class"] == "1"
    grid = np.array(got["attention"]["grid"])
    assert grid.shape == (4, 4) and (grid > 0).all()  # 28 / patch 7: the class token's rollout over 16 patches
    heat = Image.open(io.BytesIO(__import__("base64").b64decode(got["attention"]["png"].split(",", 1)[1])))
    assert heat.format == "PNG" and heat.size == (112, 112) and heat.mode == "RGB"


@pytest.mark.slow
def test_a_multipart_upload_gets_the_same_answer(vit_client):
    data = drawn_one()
    raw = vit_client.post("/api/predict", content=data, headers={"content-type": "image/png"}).json()
    form = vit_client.post("/api/predict", files={"file": ("one.png", data, "image/png")})
    assert form.status_code == 200 and form.json() == raw
    empty = vit_client.post("/api/predict", data={"note": "no file"}, files={"other": ("x.txt", b"", "text/plain")})
    assert empty.status_code == 400 and "holds no image" in empty.json()["error"]
    no_file = vit_client.post("/api/predict", headers={"content-type": "multipart/form-data; boundary=b"},
                              content=b'--b\r\nContent-Disposition: form-data; name="note"\r\n\r\nhi\r\n--b--\r\n')
    assert no_file.status_code == 400 and "holds no file" in no_file.json()["error"]


@pytest.mark.slow
def test_ink_on_paper_gets_the_answer_of_light_on_black_and_a_blank_page_a_warning(vit_client):
    """The page reads pictures through the run's framing, as `anyformer predict` does: a dark stroke
    on white is the same digit as a white stroke on black; an empty page is flagged, not trusted."""
    def ask(data: bytes) -> dict:
        r = vit_client.post("/api/predict", content=data, headers={"content-type": "image/png"})
        assert r.status_code == 200, r.text
        return r.json()
    light = ask(drawn_one())
    paper = ask(png(ImageOps.invert(Image.open(io.BytesIO(drawn_one())))))
    assert [t["class"] for t in paper["top"]] == [t["class"] for t in light["top"]]
    assert light["warning"] is None and paper["warning"] is None
    blank = ask(png(Image.new("L", (280, 280), 255)))
    assert isinstance(blank["warning"], str) and blank["warning"]


@pytest.mark.slow
def test_a_generator_run_serves_samples_of_the_class_asked(dit_run):
    client = TestClient(create_app(str(dit_run), Limits()), raise_server_exceptions=False)
    assert client.get("/api/info").json()["family"] == "dit"
    ask = {"class": 3, "n": 2, "steps": 2, "cfg": 2.0, "seed": 7}
    r = client.post("/api/sample", json=ask)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["class"] == "3" and len(got["images"]) == 2
    decoded = [np.array(Image.open(io.BytesIO(base64.b64decode(u.split(",", 1)[1]))))
               for u in got["images"]]
    # Exactly what the model's own sampler gives for that seed.
    want = af.load(dit_run).sample(torch.tensor([3, 3]), steps=2, cfg=2.0, seed=7)
    np.testing.assert_array_equal(np.stack(decoded), want[:, 0].numpy())
    assert client.post("/api/sample", json=ask).json() == got  # the seed repeats
    bad = client.post("/api/sample", json={**ask, "class": 10})
    assert bad.status_code == 422 and "class must be" in bad.json()["error"]
    assert client.post("/api/sample", content=b"{}", headers={"content-type": "text/plain"}).status_code == 415
    assert client.post("/api/sample", json=ask).status_code == 200  # still serving


def truncated_png() -> bytes:
    full = png(Image.fromarray(np.random.default_rng(0).integers(0, 255, (200, 200), dtype=np.uint8)))
    return full[: len(full) // 2]


def bomb_png() -> bytes:
    # 2,000 x 2,000 of one colour: a few kB on the wire, 4 megapixels once decoded (the limit here is 1).
    return png(Image.new("L", (2000, 2000)))


@pytest.mark.parametrize("body, content_type, status, words", [
    (b"GIF89a? no, just text", "image/png", 400, "not an image"),
    (b"", "image/png", 400, "no image"),
    ("truncated", "image/png", 400, "truncated"),
    ("bomb", "image/png", 413, "2000x2000 = 4000000 pixels; the limit is 1000000"),
    ("one", "text/plain", 415, "expected an image"),
    ("one", "application/json", 415, "got application/json"),
    (b"\x89PNG" + b"\0" * 300_000, "image/png", 413, "the limit is 200000 bytes"),
])
@pytest.mark.slow
def test_bad_uploads_get_a_clear_4xx_and_the_server_goes_on(vit_client, body, content_type, status, words):
    body = {"truncated": truncated_png, "bomb": bomb_png, "one": drawn_one}[body]() if isinstance(body, str) else body
    r = vit_client.post("/api/predict", content=body, headers={"content-type": content_type})
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error"} and words in r.json()["error"]
    ok = vit_client.post("/api/predict", content=drawn_one(), headers={"content-type": "image/png"})
    assert ok.status_code == 200 and len(ok.json()["top"]) == 3


@pytest.mark.slow
def test_a_body_without_content_length_is_cut_off_at_the_limit(vit_client):
    def chunks():  # a streamed upload: no Content-Length for the server to refuse up front
        for _ in range(100):
            yield b"\0" * 10_000
    r = vit_client.post("/api/predict", content=chunks(), headers={"content-type": "image/png"})
    assert r.status_code == 413 and "over the limit of 200000 bytes" in r.json()["error"]
    still_serving(vit_client)


@pytest.mark.slow
def test_generate_equals_the_models_own_generation(lm_run, lm_client):
    r = lm_client.post("/api/generate", json={"prompt": "ROMEO:", "max_new_tokens": 40, "temperature": 0})
    assert r.status_code == 200, r.text
    model, tok = af.load(lm_run), tokenizer_from_info(read_config(lm_run)["data"])
    ids = model.generate(torch.tensor([tok.encode("ROMEO:")]), 40, temperature=0)[0, 6:]
    assert r.json() == {"prompt": "ROMEO:", "text": tok.decode(ids.tolist()), "tokens": 40}
    # seeded sampling is repeatable, and top_k=1 is greedy
    a, b = (lm_client.post("/api/generate", json={"prompt": "KING:", "max_new_tokens": 30, "seed": 7}).json()
            for _ in range(2))
    assert a == b
    k1 = lm_client.post("/api/generate", json={"prompt": "ROMEO:", "max_new_tokens": 40, "top_k": 1, "seed": 1})
    assert k1.json()["text"] == r.json()["text"]


@pytest.mark.parametrize("body, status, words", [
    ({"prompt": "x" * 301}, 413, "301 characters; the limit is 300"),
    ({"prompt": "ROMEO:", "max_new_tokens": 101}, 422, "max_new_tokens must be in [1, 100]"),
    ({"prompt": "ROMEO:", "temperature": "hot"}, 422, "temperature must be int or float"),
    ({"prompt": "ROMEO:", "top_k": 0}, 422, "top_k must be in [1"),
    ({"prompt": "ROMEO:", "stream": "yes"}, 422, "stream must be bool"),
    ({"prompt": "ROMEO:", "tokens": 5}, 422, "unknown fields ['tokens']"),
    ({"prompt": "Ω"}, 422, "is not in the tokenizer's alphabet"),
    ({"prompt": ""}, 422, "at least one token"),
    (["ROMEO:"], 400, "expected a JSON object"),
])
@pytest.mark.slow
def test_bad_generation_requests_get_a_clear_4xx(lm_client, body, status, words):
    r = lm_client.post("/api/generate", json=body)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]
    still_serving(lm_client)


@pytest.mark.slow
def test_generate_through_the_compiled_decode_step_gives_the_same_text(lm_run, lm_client):
    """The server's generation with the plan's compiled one-token step (forced here, at the door, as
    the warm-up settles it; a real inductor compile; each token's step on whichever worker thread
    takes it)."""
    from anyformer.models.generation import compiled_steps
    model = lm_client.app.state.context.model
    eager = lm_client.post("/api/generate", json={"prompt": "KING:", "max_new_tokens": 30, "temperature": 0})
    try:
        with plan.forcing(compile="compiled"):
            assert plan.prepare_decode(model, 1, 36)
        compiled = lm_client.post("/api/generate", json={"prompt": "KING:", "max_new_tokens": 30, "temperature": 0})
        assert model.compiled_decode(1, 36)
    finally:
        compiled_steps(model).clear()  # the other tests' server generates eagerly, as the suite's plan says
    assert eager.status_code == compiled.status_code == 200, compiled.text
    assert compiled.json() == eager.json()


@pytest.mark.slow
def test_generate_refuses_what_is_not_json(lm_client):
    r = lm_client.post("/api/generate", content=b"prompt=ROMEO", headers={"content-type": "text/plain"})
    assert r.status_code == 415 and "application/json" in r.json()["error"]
    r = lm_client.post("/api/generate", content=b"{prompt:", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]
    assert lm_client.post("/api/predict", content=drawn_one(), headers={"content-type": "image/png"}).status_code == 404


@pytest.mark.slow
def test_generation_streams_over_a_real_server_while_predictions_are_answered(lm_run, vit_run):
    """Over HTTP, the text arrives in many pieces that join to the JSON answer's text."""
    import httpx
    with live_server(create_app(str(lm_run))) as url, httpx.Client(base_url=url, timeout=60) as client:
        request = {"prompt": "ROMEO:", "max_new_tokens": 100, "temperature": 0}
        whole = client.post("/api/generate", json=request).json()["text"]
        pieces = []
        with client.stream("POST", "/api/generate", json={**request, "stream": True}) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
            assert "content-length" not in r.headers
            pieces = [p for p in r.iter_raw() if p]
        assert b"".join(pieces).decode() == whole and len(pieces) >= 10
        # a client that walks away mid-stream leaves a server that goes on answering
        with client.stream("POST", "/api/generate", json={**request, "stream": True}) as r:
            next(r.iter_raw())
        assert client.post("/api/generate", json=request).json()["text"] == whole


@pytest.mark.slow
def test_the_page_names_the_run_and_carries_the_test_hooks(vit_client, lm_client):
    page = vit_client.get("/")
    assert page.status_code == 200 and "default-src 'self'" in page.headers["content-security-policy"]
    for hook in ("canvas", "upload", "prediction", "attention", "error"):
        assert f'data-testid="{hook}"' in page.text
    info = json.loads(page.text.split('id="run-info">', 1)[1].split("</script>", 1)[0])
    assert info["family"] == "vit" and info["classes"] == [str(i) for i in range(10)]
    assert vit_client.get("/static/classify.js").status_code == 200
    lm_page = lm_client.get("/").text
    assert 'data-testid="prompt"' in lm_page and 'data-testid="output"' in lm_page and 'data-testid="canvas"' not in lm_page
    assert lm_client.get("/api/info").json()["max_new_tokens"] == 100


@pytest.mark.slow
def test_bad_limits_and_bad_runs_are_refused_before_serving(tmp_path, vit_run):
    with pytest.raises(ValueError, match="max_body_bytes must be a positive int, got 0"):
        Limits(max_body_bytes=0)
    with pytest.raises(FileNotFoundError, match="no model in"):
        create_app(str(tmp_path))


@pytest.mark.slow
def test_the_command_refuses_a_missing_run_in_one_line(tmp_path):
    from tests.cli_runner import run
    r = run("serve", str(tmp_path / "nothing"), "--port", "1")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no model in" in r.stderr, r.stderr


@pytest.mark.slow
def test_every_refusal_is_json_wrong_routes_and_methods_too(vit_client, lm_client):
    r = vit_client.get("/api/predict")
    assert r.status_code == 405 and r.headers["content-type"] == "application/json"
    assert r.json()["error"] == "GET is not allowed on /api/predict; use POST" and r.headers["allow"] == "POST"
    r = lm_client.post("/api/predict", content=drawn_one(), headers={"content-type": "image/png"})
    assert r.status_code == 404 and "no such route: /api/predict" in r.json()["error"]
    r = vit_client.get("/api/nothing-here")
    assert r.status_code == 404 and r.json()["error"].startswith("no such route: /api/nothing-here")


@pytest.mark.slow
def test_the_plan_is_made_at_start_up_and_healthz_says_ready(vit_run, monkeypatch, tmp_path):
    """With the speed plan on (the suite runs stock), the server measures its kernels while it starts:
    /healthz then says ready, and the first request measures nothing."""
    from anyformer import plan
    monkeypatch.setenv("ANYFORMER_PLAN", "auto")
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path / "cache"))
    plan.reset()
    try:
        app = create_app(str(vit_run))
        measured_at_start = list(plan.planner().measured)
        with TestClient(app) as client:
            health = client.get("/healthz").json()
            r = client.post("/api/predict", content=drawn_one(), headers={"content-type": "image/png"})
        measured_by_request = plan.planner().measured[len(measured_at_start):]
    finally:
        monkeypatch.undo()
        plan.reset()
    assert health["ready"] is True and health["family"] == "vit" and health["warm_up_seconds"] > 0
    assert r.status_code == 200 and measured_at_start, measured_at_start
    assert measured_by_request == [], measured_by_request


@pytest.mark.slow
def test_the_api_generates_a_thousand_tokens_from_a_context_of_128(lm_run):
    # The default limits allow 1,000 new tokens; the cost budget (--max-work-seconds) is lifted, since
    # it judges a request by the token time measured at start, which a busy host makes longer.
    client = TestClient(create_app(str(lm_run), Limits(max_work_seconds=1e6)))
    assert client.get("/api/info").json()["max_new_tokens"] == 1000
    r = client.post("/api/generate", json={"prompt": "ROMEO:", "max_new_tokens": 1000, "seed": 1})
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == 1000 and len(r.json()["text"]) == 1000
