"""Who may use a server: on this machine, anyone on it, as before; bound beyond it, only the holder of
its token, as Jupyter does it.

- The token: `--token`, else $ANYFORMER_SERVE_TOKEN, else one made at start (256 random bits) and
  printed in the URL of the `serving RUN at URL` line. On a loopback address none is asked for unless
  one is given.
- A client shows it as `Authorization: Bearer TOKEN`. A browser opens the printed URL once: `?token=`
  on a GET is answered 303 to the same path without it, with an HttpOnly, SameSite=Strict cookie, so
  the token leaves the address bar and the history and the page's own calls carry it.
- Compared in constant time (hmac.compare_digest), so the time of a refusal says nothing of how much
  of a guess was right.
- /healthz stays open: load balancers and orchestrators probe it without credentials. Everything
  else (the page, its scripts, the API, /metrics) answers 401 with one line and WWW-Authenticate.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl, urlencode

from .guard import REFUSAL, ASGIApp, Receive, Scope, Send, answer, refuse

TOKEN_ENV = "ANYFORMER_SERVE_TOKEN"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
OPEN_PATHS = ("/healthz",)
MIN_TOKEN_CHARS = 16  # a token shorter than this is a password a guesser can walk through


def server_token(host: str, given: str | None = None) -> str | None:
    """The token the server will ask for (None: none asked, on a loopback address with none given).
    Raises ValueError, in one line, for a token too short or with characters a header cannot hold."""
    token = given if given is not None else (os.environ.get(TOKEN_ENV) or None)
    if token is None:
        return None if host in LOOPBACK else secrets.token_urlsafe(32)
    source = "--token" if given is not None else f"${TOKEN_ENV}"
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"{source} has {len(token)} characters; expected at least {MIN_TOKEN_CHARS} "
                         f"(leave it out and serve makes one)")
    if not all(33 <= ord(c) < 127 and c not in '";,\\' for c in token):
        raise ValueError(f"{source} holds a space, a quote, a comma, a semicolon, a backslash or a non-ASCII "
                         f"character; expected printable ASCII without them (it travels in a header and a cookie)")
    return token


def cookie_name(token: str) -> str:
    """A name of the token's own, so two servers on one host (cookies ignore the port) keep theirs apart."""
    return "anyformer-" + hashlib.sha256(token.encode()).hexdigest()[:12]


def with_token(url: str, token: str | None) -> str:
    """The URL a browser opens once to be let in (`url` itself where no token is asked for)."""
    return url if token is None else f"{url}?{urlencode({'token': token})}"


class TokenGate:
    """ASGI middleware: a request without the token gets 401; `?token=` on a GET becomes the cookie."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app, self.token = app, token
        self._expected = token.encode() if token is not None else b""
        self._cookie = cookie_name(token) if token is not None else ""

    def _matches(self, offered: str | None) -> bool:
        return offered is not None and hmac.compare_digest(offered.encode(), self._expected)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.token is None or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        in_query = [v for k, v in query if k == "token"]
        if in_query and scope["method"] == "GET":
            if not self._matches(in_query[-1]):
                return await self._refuse(scope, send, "the token in the URL is not this server's")
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            location = scope["path"] + (f"?{rest}" if rest else "")
            return await answer(send, 303, b"", [
                (b"location", location.encode("latin-1")),
                (b"set-cookie", f"{self._cookie}={self.token}; Path=/; HttpOnly; SameSite=Strict".encode())])
        scheme, _, credential = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self._matches(credential.strip()):
            return await self.app(scope, receive, send)
        if self._matches(_cookie(headers.get("cookie", ""), self._cookie)):
            return await self.app(scope, receive, send)
        what = "the token sent is not this server's" if scheme or "cookie" in headers else "no token came"
        await self._refuse(scope, send, what)

    async def _refuse(self, scope: Scope, send: Send, what: str) -> None:
        scope[REFUSAL] = "unauthorized"
        message = (f"{what}; expected 'Authorization: Bearer TOKEN', or open the URL that `anyformer serve` "
                   f"printed at start (it ends in ?token=...)")
        await refuse(send, 401, message, headers=[(b"www-authenticate", b'Bearer realm="anyformer"')])


def _cookie(header: str, name: str) -> str | None:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return None  # a malformed header carries no token
    return jar[name].value if name in jar else None

