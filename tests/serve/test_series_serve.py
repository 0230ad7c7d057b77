"""The series section: a CSV upload (raw body or multipart) answered with the classes and the attention
over time that the model itself gives, read exactly as `anyformer predict` reads the file."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import anyformer as af
from anyformer.cli.series import load_series_input
from anyformer.data.series.dataset import load_series_splits
from anyformer.models import read_config
from anyformer.viz.series_attention import series_attention

from starlette.testclient import TestClient  # noqa: E402  (after conftest's importorskip)

from anyformer.serve import Limits, create_app  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client(series_run):
    return TestClient(create_app(str(series_run), Limits(max_body_bytes=100_000)), raise_server_exceptions=False)


def csv_of(series: np.ndarray) -> bytes:
    """(C, T) -> a CSV with a header, one column per channel, one row per step."""
    head = ",".join(f"ch{c}" for c in range(series.shape[0]))
    return (head + "\n" + "\n".join(",".join(f"{v:.6f}" for v in row) for row in series.T) + "\n").encode()


def test_a_csv_upload_answers_the_models_classes_and_attention(series_run, client, tmp_path):
    _, test = load_series_splits("BasicMotions")
    data = csv_of(test.values[0].numpy())
    r = client.post("/api/predict", content=data, headers={"content-type": "text/csv"})
    assert r.status_code == 200, r.text
    got = r.json()
    info = client.get("/api/info").json()
    assert info["task"] == "classify-series" and info["channels"] == 6 and len(info["classes"]) == 4
    # The same file through `predict`'s reader and the model directly.
    (tmp_path / "one.csv").write_bytes(data)
    model, meta = af.load(series_run).eval(), read_config(series_run)
    _, x, warning = load_series_input(str(tmp_path / "one.csv"), model, meta["data"])
    probs, steps = series_attention(model, x, torch.tensor([x.shape[-1]]))
    best = int(probs[0].argmax())
    assert got["top"][0]["class"] == meta["data"]["classes"][best] and warning is None and got["warning"] is None
    assert got["top"][0]["probability"] == pytest.approx(float(probs[0, best]), abs=1e-5)
    assert len(got["attention"]["steps"]) == 100 and sum(got["attention"]["steps"]) == pytest.approx(1, abs=1e-4)
    np.testing.assert_allclose(got["attention"]["steps"], steps[0], atol=1e-5)
    assert np.array(got["series"]).shape == (6, 100)
    # The same bytes as a multipart file get the same answer.
    form = client.post("/api/predict", files={"file": ("one.csv", data, "text/csv")})
    assert form.status_code == 200 and form.json() == got


def test_a_longer_series_is_resampled_with_a_warning(client):
    r = client.post("/api/predict", content=csv_of(np.random.default_rng(0).normal(size=(6, 150))),
                    headers={"content-type": "text/plain"})
    assert r.status_code == 200 and "150 steps, longer than the 100" in r.json()["warning"]
    assert len(r.json()["attention"]["steps"]) == 100


@pytest.mark.parametrize("body, kind, status, fragment", [
    (b"1,2,3\n4,5,6\n", "text/csv", 400, "has no axis of 6 channels"),
    (b"1,2,3,4,5,6\n1,2,x,4,5,6\n", "text/csv", 400, "the upload:2: 'x' is not a number"),
    (b"1,2,3,4,5,6\n1,2,nan,4,5,6\n", "text/csv", 400, "NaN at channel 2, step 1"),
    (b"\n", "text/csv", 400, "holds no series"),
    (b"{}", "application/json", 415, "expected a series (CSV)"),
    (b"1," * 60_000, "text/csv", 413, "limit"),
])
def test_bad_uploads_are_one_line_and_the_server_goes_on(client, body, kind, status, fragment):
    r = client.post("/api/predict", content=body, headers={"content-type": kind})
    assert r.status_code == status and fragment in r.json()["error"], r.text
    assert "\n" not in r.json()["error"]
    assert client.get("/api/info").json()["family"] == "series"
