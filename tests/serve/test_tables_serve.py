"""The table section: rows as JSON or a CSV upload answered with the run's own predictions (the same as
`af.open_run(RUN).predict`), a missing column refused with a 400 that names it, and the page's form."""
from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

import anyformer as af
from anyformer.cli import main

from starlette.testclient import TestClient  # noqa: E402  (after conftest's importorskip)

from anyformer.serve import Limits, create_app  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def table_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("table")
    rng = np.random.default_rng(0)
    n = 120
    size = rng.normal(10, 3, n)
    frame = pd.DataFrame({"size": np.round(size, 2), "colour": rng.choice(["red", "blue"], n),
                          "label": np.where(size > 10, "big", "small")})
    frame.to_csv(root / "t.csv", index=False)
    assert main(["train", "--data", str(root / "t.csv"), "--out", str(root / "run"), "--max-steps", "30",
                 "--plan", "stock", "--no-progress", "--no-plots"]) == 0
    return root


@pytest.fixture(scope="module")
def client(table_run):
    return TestClient(create_app(str(table_run / "run"), Limits(max_body_bytes=100_000)), raise_server_exceptions=False)


def test_rows_as_json_or_csv_get_the_runs_own_predictions(table_run, client):
    info = client.get("/api/info").json()
    assert info["task"] == "classify-table" and info["target"] == "label" and info["classes"] == ["big", "small"]
    assert [c["name"] for c in info["columns"]] == ["size", "colour"]
    rows = [{"size": 14.5, "colour": "red"}, {"size": None, "colour": "green"}]
    r = client.post("/api/predict", json={"rows": rows})
    assert r.status_code == 200, r.text
    got = r.json()
    want = af.open_run(table_run / "run").predict(pd.DataFrame(rows))
    assert [p["class"] for p in got["predictions"]] == want["label"].tolist()
    assert [p["probability"] for p in got["predictions"]] == pytest.approx(want["probability"].tolist(), abs=1e-6)
    assert "categories the training rows did not have" in got["warning"]  # green
    csv = client.post("/api/predict", content=b"colour,size\nred,14.5\n", headers={"content-type": "text/csv"})
    assert csv.status_code == 200 and csv.json()["predictions"][0] == got["predictions"][0]
    one = client.post("/api/predict", json={"row": rows[0]})
    assert one.json()["predictions"] == got["predictions"][:1]


@pytest.mark.parametrize("body,status,said", [
    ({"rows": [{"size": 3}]}, 400, "no column 'colour', which the run reads"),
    ({"rows": []}, 400, 'expected JSON {"rows"'),
    ({"rows": [{"size": [1, 2], "colour": "red"}]}, 400, "column 'size': list value"),
    ({"rows": [{"size": "many", "colour": "red"}]}, 400, "column 'size': 'many' is not a number"),
])
def test_bad_rows_are_refused_with_what_was_expected(client, body, status, said):
    r = client.post("/api/predict", json=body)
    assert r.status_code == status and said in r.json()["error"], r.text


def test_the_page_offers_a_cell_per_column(client):
    page = client.get("/")
    assert page.status_code == 200 and '/static/tables.js' in page.text and 'data-testid="row-form"' in page.text
    assert client.get("/static/tables.js").status_code == 200
