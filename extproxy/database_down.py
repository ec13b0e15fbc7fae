"""The answer while the database is away: a 503 that says so, not a 500 and a traceback a request.

Every page and API call reads the database; the extender endpoints do not (their calls wait in
the spool until the recorder can write them). When a request fails on the database (refused,
cut off, locked past SQLite's busy timeout, or no pooled connection within
EXTPROXY_DB_POOL_TIMEOUT), `server_error`, the project's handler500, answers 503 with
Retry-After: `{"detail": ...}` for the API, a short page for the rest, saying the scheduler is
still served. Any other failure is Django's plain 500. `OutageLogFilter`, on the django.request
logger, turns the traceback Django logs for each such request into one line a minute,
`websocket_outage_guard` does the same for the live feed's connections, and `PoolLogFilter`
for the connection pool's warning at each failed attempt.

Only OperationalError and InterfaceError count: an IntegrityError or ProgrammingError is a bug,
not an outage, and keeps its traceback. SQLite reports a missing table as an OperationalError too:
that is answered 503 as well, and its one log line a minute names it.
"""
from __future__ import annotations

import logging
import sys
from html import escape
from typing import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.defaults import server_error as plain_server_error

from .ratelog import RateLimitedLog
from .recording.deadline import DeadlinePassed

# DeadlinePassed: a statement the database did not answer within EXTPROXY_DB_STATEMENT_DEADLINE
# (statement_bound.py), its connection shut: an outage too.
OUTAGE = (OperationalError, InterfaceError, DeadlinePassed)
RETRY_AFTER = "5"  # seconds: the pool's wait, and about how soon a restarted database takes connections

_log = RateLimitedLog(logging.getLogger("extproxy.database"), interval=60.0)


def _waiting() -> str:
    """What the spool holds, for the page (the serving process knows it without the database)."""
    try:
        from .engine import get_engine

        return f" ({get_engine().recorder.status().depth} calls waiting now)"
    except Exception:  # the page is answered without it
        return ""


def server_error(request: HttpRequest) -> HttpResponse:
    exc = sys.exc_info()[1]
    if not isinstance(exc, OUTAGE):
        return plain_server_error(request)
    if isinstance(exc, DeadlinePassed):
        from django.conf import settings

        reason = (f"the database is unavailable (no answer within {settings.EXTPROXY_DB_STATEMENT_DEADLINE:g} s, "
                  "EXTPROXY_DB_STATEMENT_DEADLINE)")
    else:
        reason = f"the database is unavailable ({type(exc).__name__})"
    sentence = reason[0].upper() + reason[1:]
    said = ("Calls from kube-scheduler are still served; they wait in the spool and are recorded "
            f"when the database is back{_waiting()}.")
    if request.path == reverse("dashboard:record-status"):
        # The warnings every dashboard page refreshes in place: htmx swaps no 5xx, so an open
        # page would keep saying all is well exactly while the database is away.
        return HttpResponse(f'<ul><li class="record-database">{escape(sentence)}: these pages cannot '
                            f'be read or refreshed. {escape(said)}</li></ul>', content_type="text/html; charset=utf-8")
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"detail": f"{reason}. {said}"}, status=503)
    else:
        response = HttpResponse(
            "<!doctype html>\n<html lang=\"en\"><head><title>Database unavailable (503)</title></head><body>"
            f"<h1>Database unavailable</h1><p>{escape(sentence)}. {escape(said)}</p>"
            "<p>This page will work again once it is back.</p></body></html>\n",
            status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = RETRY_AFTER
    return response


def websocket_outage_guard(app: Callable, subprotocol: str) -> Callable:
    """The live feed's ASGI app, closing a connection with 1013 (try again later) when the
    database is away: its login (session or token) and permission are read from the database,
    and the server logged a traceback for every reconnection of every open dashboard.
    `subprotocol` is chosen when the client offered it, as the app would have (a browser fails
    the handshake when an offered protocol is not chosen)."""

    async def guarded(scope: dict, receive: Callable, send: Callable) -> None:
        accepted = False

        async def sending(message: dict) -> None:
            nonlocal accepted
            accepted = accepted or message.get("type") == "websocket.accept"
            await send(message)

        try:
            await app(scope, receive, sending)
        except OUTAGE as exc:
            _log.emit(logging.WARNING, "live-feed", "live feed connections closed: database unavailable (%s)",
                      type(exc).__name__)
            try:  # accepted first: a close before it reaches the client as an HTTP 403, without the code
                if not accepted:
                    offered = subprotocol in (scope.get("subprotocols") or ())
                    await send({"type": "websocket.accept", "subprotocol": subprotocol if offered else None})
                await send({"type": "websocket.close", "code": 1013})
            except Exception:  # the connection is gone already
                pass

    return guarded


class OutageLogFilter(logging.Filter):
    """Drops django.request's record (and traceback) of a request that failed on the database,
    and writes one line a minute instead, with how many were left out."""

    def filter(self, record: logging.LogRecord) -> bool:
        from django.conf import settings

        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, OUTAGE) or settings.DEBUG:  # DEBUG answers with Django's page, not 503
            return True
        _log.emit(logging.WARNING, "requests", "requests answered 503: database unavailable (%s: %s)",
                  type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc).strip() else "")
        return False


class PoolLogFilter(logging.Filter):
    """The connection pool's warning for each failed connection attempt (psycopg.pool), while
    the database is away: one line a minute, with how many were left out."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        # Each kind of warning on its own (its message's template): another kind is not hidden.
        _log.emit(logging.WARNING, f"pool: {record.msg}"[:200], "connection pool: %s",
                  record.getMessage().splitlines()[0])
        return False
