"""The serving process's own database waits, bounded (EXTPROXY_DB_STATEMENT_DEADLINE).

A PostgreSQL server alive at the TCP level that never answers (a stuck server process, a wedged
pooler) acknowledges every byte, so neither keepalives nor the TCP user timeout end a wait on
it. The recorder bounds its own transactions (recording/deadline.py); pages, API calls, exports,
the live feed's logins and replays in the serving process waited for ever, each holding one of
the pool's connections: past EXTPROXY_DB_POOL_SIZE of them, every page waited the pool's timeout.

Here each statement the serving process sends runs under the same watchdog as the recorder's
(`each_statement`: past the deadline and its grace the connection's socket is shut, psycopg
raises, and the request is answered 503 by database_down.server_error), and so does the pool's
health check of a pooled connection before it is handed out, which runs outside Django's
statements: a connection that went silent while idle in the pool hung there first. The server's
half is each statement's statement_timeout (settings._pool_options), so a wait on a lock another
session holds is ended by the server, which still answers, and leaves no backend behind.

PostgreSQL only (SQLite has no server that can hang); off with EXTPROXY_DB_STATEMENT_DEADLINE=0.
"""
from __future__ import annotations

import os
import socket
import threading
from typing import Any, Callable

from django.conf import settings
from django.db import connections
from django.db.backends.signals import connection_created

from .recording.deadline import GRACE, each_statement

_BOUND = "_extproxy_statement_bound"  # marks the wrapper on a connection that already has it


def install() -> None:
    """In the serving process, once at start."""
    seconds = settings.EXTPROXY_DB_STATEMENT_DEADLINE
    if seconds <= 0 or connections["default"].vendor != "postgresql":
        return
    connection_created.connect(_bound_statements, weak=False, dispatch_uid=_BOUND)
    pool = connections["default"].pool  # made here if not yet (it is opened at its first use)
    check = getattr(pool, "_check", None)  # psycopg_pool keeps the `check` Django gave it there
    if check is not None and not getattr(check, _BOUND, False):
        pool._check = bounded_check(check, seconds + GRACE)


def _bound_statements(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Each new (or newly taken from the pool) connection: its statements under the deadline."""
    if connection.vendor != "postgresql" or any(getattr(w, _BOUND, False) for w in connection.execute_wrappers):
        return
    wrapper = each_statement(settings.EXTPROXY_DB_STATEMENT_DEADLINE, connection, None, "serving process")
    setattr(wrapper, _BOUND, True)
    connection.execute_wrappers.append(wrapper)


def bounded_check(check: Callable[[Any], None], seconds: float) -> Callable[[Any], None]:
    """The pool's check of a psycopg connection, given up after `seconds`: the socket is shut,
    the check raises, and the pool discards that connection and hands out another."""

    def bounded(conn: Any) -> None:
        timer = threading.Timer(seconds, _shut, [conn])
        timer.daemon = True
        timer.start()
        try:
            check(conn)
        finally:
            timer.cancel()

    setattr(bounded, _BOUND, True)
    return bounded


def _shut(conn: Any) -> None:
    try:
        sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
    except Exception:  # closed meanwhile
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # the peer closed it already
        pass
    finally:
        sock.close()
