"""The text classifier section: a text as JSON or plain text answered with the run's own classes (the same
as `af.open_run(RUN).classify`), bad bodies refused with a 400 that says what was expected, and the page's
text box."""
from __future__ import annotations

import pytest

import anyformer as af

from starlette.testclient import TestClient  # noqa: E402  (after conftest's importorskip)

from anyformer.serve import Limits, create_app  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client(text_run):
    return TestClient(create_app(str(text_run), Limits(max_body_bytes=100_000)), raise_server_exceptions=False)


def test_a_text_is_answered_with_the_runs_own_classes(text_run, client):
    info = client.get("/api/info").json()
    assert info["task"] == "classify-text" and info["classes"] == ["cooking", "sport", "weather"]
    r = client.post("/api/predict", json={"texts": ["A storm, then rain", "the referee, the final whistle"]})
    assert r.status_code == 200, r.text
    got = r.json()["predictions"]
    want = af.open_run(text_run).classify(["A storm, then rain", "the referee, the final whistle"], top=1)
    assert [p["class"] for p in got] == [w[0][0] for w in want]
    assert [p["probability"] for p in got] == pytest.approx([w[0][1] for w in want], abs=1e-6)
    assert set(got[0]["probabilities"]) == set(info["classes"])
    one = client.post("/api/predict", json={"text": "A storm, then rain"})
    assert one.json()["predictions"] == got[:1]
    plain = client.post("/api/predict", content="A storm, then rain".encode(), headers={"content-type": "text/plain"})
    assert plain.json()["predictions"] == got[:1]


@pytest.mark.parametrize("body,said", [({"texts": []}, 'expected JSON {"text"'), ({"text": 3}, 'expected JSON {"text"'),
                                       ({"rows": ["x"]}, 'expected JSON {"text"'),
                                       ({"texts": ["a storm", " \n"]}, "text 2 of 2 is blank")])
def test_bad_bodies_are_refused_in_one_line(client, body, said):
    r = client.post("/api/predict", json=body)
    assert r.status_code == 400 and said in r.json()["error"]


def test_the_page_has_a_text_box(client):
    page = client.get("/").text
    assert 'data-testid="text"' in page and "/static/texts.js" in page
