"""A bound on how long one transaction of the recorder may take, kept on the client side.

A PostgreSQL server alive at the TCP level that never answers (its process stuck, a pooler in
front of it wedged) acknowledges every byte and every keepalive, so neither keepalives nor the
TCP user timeout fire, and the recorder waited on its statement for ever: no draining, no
reports, the spool filled and every later call was dropped. Past the deadline a watchdog thread
shuts the connection's socket down (through a duplicate of its descriptor: shutdown acts on the
socket both name), so the wait in progress sees the end of the stream and psycopg raises; the
caller counts an outage and replaces the connection. psycopg's cancel is no help here: it sends
the cancel request over a new connection to the same address, which a wedged pooler or server
does not answer either, and a stuck backend need not act on it.

The server keeps its own half: the same bound is each statement's statement_timeout (SET
LOCAL: this transaction only), so a statement waiting on a lock another session holds (`LOCK
TABLE`, a migration) is cancelled by the server itself, which still answers: the connection is
kept, the error says why, and no backend is left behind waiting on the lock (a backend waiting
on a lock does not look at its client's socket, so with the socket shut instead each retry could
leave one, holding a connection slot, until the lock went). The watchdog waits GRACE longer, so
that a server that answers at all ends the statement first.

A retention pass is no one transaction of bounded size: there the bound is each statement's
(`each_statement`, by the watchdog alone), as its queries work through chunks.

SQLite has no server that can hang, and its busy timeout (settings.py) bounds a wait on a lock:
nothing is done there.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
from types import TracebackType
from typing import Any, Callable

log = logging.getLogger(__name__)

GRACE = 1.0  # seconds the watchdog waits past the deadline for the server's statement_timeout


class DeadlinePassed(Exception):
    """The database did not answer within the deadline: an outage, not a refusal of the data."""


class Deadline:
    """`with Deadline(seconds, wrapper):` the database work inside, on Django connection
    `wrapper` (the thread's own, not the proxy), gives up after `seconds`; 0 means no bound."""

    def __init__(self, seconds: float, wrapper: Any) -> None:
        self.seconds = seconds if wrapper.vendor == "postgresql" else 0.0
        self.wrapper = wrapper
        self.passed = False
        self._lock = threading.Lock()
        self._done = False
        self._timer: threading.Timer | None = None

    def __enter__(self) -> Deadline:
        if self.seconds > 0:
            self._timer = threading.Timer(self.seconds + GRACE, self._expire)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._lock:  # once past this, the watchdog touches the connection no more
            self._done = True
        if self._timer is not None:
            self._timer.cancel()
        if self.passed and exc is not None and not isinstance(exc, DeadlinePassed):
            raise DeadlinePassed(f"no answer from the database within {self.seconds:g} s "
                                 f"(EXTPROXY_DB_STATEMENT_DEADLINE) and {GRACE:g} s more; connection shut") from exc
        if self.passed and exc is None:  # it answered just as the socket was shut: not usable now
            close_quietly(self.wrapper)

    def set_server_limit(self) -> None:
        """Inside the transaction: each of its statements also ends on the server at the deadline."""
        if self.seconds > 0:
            with self.wrapper.cursor() as cursor:
                cursor.execute("SET LOCAL statement_timeout = %s", [max(1, round(self.seconds * 1000))])

    def _expire(self) -> None:
        with self._lock:
            if self._done:
                return
            raw = getattr(self.wrapper, "connection", None)  # psycopg's, None while connecting
            try:
                fd = raw.pgconn.socket if raw is not None else -1
            except Exception:  # closed meanwhile
                fd = -1
            if fd < 0:  # connecting (libpq's connect_timeout bounds that): looked at again soon
                self._timer = threading.Timer(1.0, self._expire)
                self._timer.daemon = True
                self._timer.start()
                return
            self.passed = True
            try:
                sock = socket.socket(fileno=os.dup(fd))
            except OSError:
                return
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # the peer closed it already
                pass
            finally:
                sock.close()
        log.error("recorder: no answer from the database within %g s; connection shut", self.seconds + GRACE)



def each_statement(seconds: float, wrapper: Any) -> Callable[..., Any]:
    """For `wrapper.execute_wrapper(...)`: every statement run inside gets its own Deadline."""
    def bounded(execute: Callable[..., Any], sql: Any, params: Any, many: bool, context: Any) -> Any:
        with Deadline(seconds, wrapper):
            return execute(sql, params, many, context)
    return bounded


def close_quietly(wrapper: Any) -> None:
    """Close a Django connection that may be broken (it is opened again at its next use)."""
    try:
        wrapper.close()
    except Exception:  # closing a shut connection may fail too
        pass
