"""Who may use a server (anyformer/serve/access.py): the token a server bound beyond this machine asks
for, its one-time URL turned into a cookie, the refusals (401), /healthz open, and loopback as easy as
before. On a bare Starlette app behind the real guard and gate; the command itself is in test_ready.py."""
from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from anyformer.serve.access import MIN_TOKEN_CHARS, TOKEN_ENV, TokenGate, cookie_name, server_token, with_token
from anyformer.serve.guard import Guard, GuardMiddleware

TOKEN = "s3cret-token-of-this-server"


def client(token: str | None) -> tuple[TestClient, Guard]:
    async def ok(request):
        return JSONResponse({"path": request.url.path, "query": dict(request.query_params)})

    routes = [Route(p, ok) for p in ("/", "/healthz", "/api/info")]
    routes.append(Route("/metrics", lambda request: PlainTextResponse(guard.metrics.render({}, ready=True))))
    guard = Guard(30.0, {"/", "/healthz", "/api/info", "/metrics"})
    app = Starlette(routes=routes, middleware=[Middleware(GuardMiddleware, guard=guard),
                                               Middleware(TokenGate, token=token)])
    return TestClient(app, base_url="http://203.0.113.7:8000", follow_redirects=False), guard


def test_without_a_token_every_request_is_answered_as_before():
    c, _ = client(None)
    assert c.get("/api/info").status_code == 200 and c.get("/").status_code == 200


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-token-of-someone-else"},
                                     {"Authorization": f"Basic {TOKEN}"}, {"Authorization": f"Bearer {TOKEN}x"},
                                     {"Cookie": f"{cookie_name(TOKEN)}=nope"}, {"Cookie": f"other={TOKEN}"}])
def test_a_request_without_the_token_is_refused_with_401_and_one_line(headers):
    c, _ = client(TOKEN)
    r = c.get("/api/info", headers=headers)
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"].startswith("Bearer")
    error = r.json()["error"]
    assert "Authorization: Bearer TOKEN" in error and "\n" not in error and TOKEN not in error
    assert ("no token came" in error) == (not headers)


def test_the_bearer_token_lets_a_request_in_and_healthz_needs_none():
    c, _ = client(TOKEN)
    assert c.get("/api/info", headers={"Authorization": f"Bearer {TOKEN}"}).json()["path"] == "/api/info"
    assert c.get("/api/info", headers={"Authorization": f"bearer  {TOKEN}"}).status_code == 200
    assert c.get("/healthz").status_code == 200
    assert c.get("/metrics").status_code == 401  # counts of traffic are the owner's too


def test_the_one_time_url_becomes_a_cookie_and_leaves_the_address_bar():
    c, _ = client(TOKEN)
    r = c.get(f"/?token={TOKEN}&lang=en")
    assert r.status_code == 303 and r.headers["location"] == "/?lang=en"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{cookie_name(TOKEN)}={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    # The client keeps the cookie: the page, then the API its scripts call, without the token in sight.
    assert c.get("/?lang=en").json() == {"path": "/", "query": {"lang": "en"}}
    assert c.get("/api/info").status_code == 200


def test_a_wrong_token_in_the_url_sets_nothing():
    c, _ = client(TOKEN)
    r = c.get("/?token=not-the-token-at-all")
    assert r.status_code == 401 and "set-cookie" not in r.headers
    assert "not this server's" in r.json()["error"]
    assert c.get("/api/info").status_code == 401


def test_a_refusal_is_counted_in_the_metrics_as_unauthorized():
    c, guard = client(TOKEN)
    c.get("/api/info")
    c.get("/api/info", headers={"Authorization": "Bearer wrong-token-of-someone-else"})
    text = c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
    line = next(x for x in text.splitlines() if 'reason="unauthorized"' in x and not x.startswith("#"))
    assert line.endswith(" 2"), text


def test_the_server_token_comes_from_the_flag_the_environment_or_is_made(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert server_token("127.0.0.1") is None and server_token("::1") is None and server_token("localhost") is None
    made = {server_token("0.0.0.0") for _ in range(3)}
    assert len(made) == 3 and all(len(t) >= 40 for t in made)  # 256 random bits, new at each start
    assert server_token("127.0.0.1", TOKEN) == TOKEN  # given on loopback: asked for there too
    monkeypatch.setenv(TOKEN_ENV, "from-the-environment-1")
    assert server_token("0.0.0.0") == "from-the-environment-1" == server_token("127.0.0.1")
    assert server_token("0.0.0.0", TOKEN) == TOKEN  # the flag beats the environment


@pytest.mark.parametrize("bad, said", [("short", f"expected at least {MIN_TOKEN_CHARS}"),
                                       ("has a space in it somewhere", "printable ASCII"),
                                       ("semi;colon-in-the-token", "printable ASCII"),
                                       ("ünïcode-in-the-token-here", "printable ASCII")])
def test_a_token_that_cannot_serve_is_refused_in_one_line(bad, said, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(ValueError, match="--token") as e:
        server_token("0.0.0.0", bad)
    assert said in str(e.value) and "\n" not in str(e.value)


def test_two_servers_on_one_host_keep_their_cookies_apart_and_the_url_carries_the_token():
    assert cookie_name(TOKEN) != cookie_name(TOKEN + "2") and TOKEN not in cookie_name(TOKEN)
    assert with_token("http://0.0.0.0:8000/", "a+b/c=d-e_f.g~h") == "http://0.0.0.0:8000/?token=a%2Bb%2Fc%3Dd-e_f.g~h"
    assert with_token("http://127.0.0.1:8000/", None) == "http://127.0.0.1:8000/"
