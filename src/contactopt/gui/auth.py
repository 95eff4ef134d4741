"""Access check and a read-only JSON route on viser's HTTP/websocket server.

viser 1.1.1 serves its page and its websocket on one port through
``websockets.asyncio.server.serve(..., process_request=...)`` and offers no hook of its own
for either.  :func:`guarded_serve` wraps ``process_request`` while the server starts so that

* every request — the page, its assets and the websocket handshake — must carry the token,
  either as ``?token=T`` (the printed URL; the answer then sets a same-site cookie) or as that
  cookie (which the browser sends with the websocket handshake); others get 403;
* ``GET /contactopt/state.json`` answers ``state()`` as JSON (same check), for tests and scripts.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import math
import urllib.parse

__all__ = ["COOKIE", "STATE_PATH", "guarded_serve"]

COOKIE = "contactopt_token"
STATE_PATH = "/contactopt/state.json"


def _json_default(o):
    import numpy as np

    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.floating, np.integer, np.bool_)):
        return o.item()
    return str(o)


def _clean(o):
    """NaN/inf → None, recursively (strict JSON)."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def _token_of(request) -> tuple[str | None, bool]:
    """``(token, from_query)`` of a request: the ``token`` query parameter, else the cookie."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(request.path).query)
    if query.get("token"):
        return query["token"][0], True
    for header in request.headers.get_all("Cookie"):
        for part in header.split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE:
                return urllib.parse.unquote(value), False
    return None, False


@contextlib.contextmanager
def guarded_serve(token: str | None, state):
    """While active, servers started with ``websockets.asyncio.server.serve`` check ``token``
    (None: no check) and answer :data:`STATE_PATH` with ``json.dumps(state())``.

    Yields a dict whose ``"installed"`` is True once a server was started through the guard
    (the caller refuses to run with a token when it stays False)."""
    import websockets.asyncio.server as wss
    from websockets.datastructures import Headers
    from websockets.http11 import Response

    original = wss.serve

    def reply(status: int, reason: str, body: bytes, ctype: str = "text/plain") -> Response:
        return Response(status, reason, Headers({"Content-Type": ctype, "Cache-Control": "no-store",
                                                 "Content-Length": str(len(body))}), body)

    status = {"installed": False}

    def serve(*args, process_request=None, **kwargs):
        inner = process_request
        status["installed"] = True

        def check(connection, request):
            from_query = False
            if token is not None:
                given, from_query = _token_of(request)
                if given is None or not hmac.compare_digest(given.encode(), token.encode()):
                    return reply(403, "Forbidden", b"contactopt gui: a valid token is required "
                                                   b"(open the URL printed by contactopt gui)\n")
            if urllib.parse.urlsplit(request.path).path == STATE_PATH:
                body = json.dumps(_clean(state()), default=_json_default).encode()
                return reply(200, "OK", body, "application/json")
            response = inner(connection, request) if inner is not None else None
            if response is not None and from_query and token is not None:
                response.headers["Set-Cookie"] = (f"{COOKIE}={urllib.parse.quote(token)}; Path=/; HttpOnly; "
                                                  "SameSite=Strict")
            return response

        return original(*args, process_request=check, **kwargs)

    wss.serve = serve
    try:
        yield status
    finally:
        wss.serve = original
