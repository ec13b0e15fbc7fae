"""Websocket admission for /ws/live/: the origin check, and authentication by API token.

Token: scripts offer the subprotocols `extproxy` and `extproxy.token.<key>` in the
Sec-WebSocket-Protocol header, which no server logs; the server answers with `extproxy`
(browsers require an offered protocol to be chosen). `?token=<key>` still works, and the log
filter (extproxy.logsafety) keeps it out of the server's log lines. The session cookie is
tried first.

Origin: a browser always sends Origin, so a page on another site must not be able to open
the stream with the user's cookie. Accepted: no Origin at all (not a browser), the socket's
own origin (same scheme and Host, and that Host in ALLOWED_HOSTS), or one listed in
CSRF_TRUSTED_ORIGINS; never any other, even with ALLOWED_HOSTS = "*". A refused connection is
accepted and closed at once with code 4403, so the client sees why (a refusal before accepting
would reach it only as an HTTP 403).
"""
from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from channels.db import database_sync_to_async
from django.conf import settings
from django.http.request import split_domain_port, validate_host

SUBPROTOCOL = "extproxy"
TOKEN_PREFIX = "extproxy.token."


@database_sync_to_async
def _token_for(key: str):
    """The valid token with this key, its user read with it; None for none or an expired one
    (refused as a bad one is)."""
    from rest_framework.authtoken.models import Token

    from extproxy.api.token_age import expired

    try:
        token = Token.objects.select_related("user").get(key=key)
    except Token.DoesNotExist:
        return None
    return None if expired(token) else token


def _token(scope) -> str:
    for protocol in scope.get("subprotocols") or ():
        if protocol.startswith(TOKEN_PREFIX):
            return protocol[len(TOKEN_PREFIX):]
    return parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]


class TokenAuthMiddleware:
    """Sets scope["user"] from the token when the session gave no authenticated user, and
    answers the `extproxy` subprotocol when the client offered it."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        user = scope.get("user")
        if user is None or not user.is_authenticated:
            key = _token(scope)
            if key:
                token = await _token_for(key)
                if token is not None and token.user.is_active:
                    from extproxy.api.token_age import ends_at

                    # the key, so the socket can be closed when this token is deleted (live_access),
                    # and its end, when it expires (consumers.LiveConsumer)
                    scope = dict(scope, user=token.user, token_key=key, token_ends=ends_at(token))
        if SUBPROTOCOL in (scope.get("subprotocols") or ()):
            send = _choosing_subprotocol(send)
        return await self.inner(scope, receive, send)


def _choosing_subprotocol(send):
    async def wrapped(message):
        if message["type"] == "websocket.accept" and not message.get("subprotocol"):
            message = dict(message, subprotocol=SUBPROTOCOL)
        await send(message)

    return wrapped


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def origin_allowed(scope) -> bool:
    origin = _header(scope, b"origin")
    if origin is None:
        return True
    if origin.rstrip("/") in [o.rstrip("/") for o in settings.CSRF_TRUSTED_ORIGINS]:
        return True
    host = _header(scope, b"host") or ""
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):  # as Django checks HTTP requests
        return False
    scheme = "https" if scope.get("scheme") in ("wss", "https") else "http"
    parsed = urlsplit(origin)
    return parsed.scheme == scheme and parsed.netloc.lower() == host.lower()


class OriginValidator:
    """Admits a websocket only from an allowed origin (see the module docstring)."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not origin_allowed(scope):
            await refuse(receive, send, 4403)
            return
        return await self.inner(scope, receive, send)


async def refuse(receive, send, code: int) -> None:
    """Accept, then close with `code` at once: the only way a close code reaches the client."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.close", "code": code})
