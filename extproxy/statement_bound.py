"""The serving process's own database waits, bounded (EXTPROXY_DB_STATEMENT_DEADLINE).

A PostgreSQL server alive at the TCP level that never answers (a stuck server process, a wedged
pooler) acknowledges every byte, so neither keepalives nor the TCP user timeout end a wait on
it. The recorder bounds its own transactions (recording/deadline.py); pages, API calls, exports,
the live feed's logins and replays in the serving process waited for ever, each holding one of
the pool's connections: past EXTPROXY_DB_POOL_SIZE of them, every page waited the pool's timeout.

Here each statement the serving process sends is watched, and so is the pool's health check of
a pooled connection before it is handed out (it runs outside Django's statements: a connection
that went silent while idle in the pool hung there first). Past the deadline and its grace the
connection's socket is shut, psycopg raises, and the request is answered 503 by
database_down.server_error. One watchdog thread for the process looks at what is in flight a few
times a second: a thread per statement, as the recorder's Deadline starts one per transaction,
cost about 280 µs a statement here, and a page runs dozens. The server's half is each
statement's statement_timeout (settings._pool_options): a wait on a lock another session holds
is ended by the server, which still answers, and leaves no backend behind.

PostgreSQL only (SQLite has no server that can hang); off with EXTPROXY_DB_STATEMENT_DEADLINE=0.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from django.conf import settings
from django.db import connections
from django.db.backends.signals import connection_created

from .recording.deadline import GRACE, DeadlinePassed, close_quietly, shut_socket

log = logging.getLogger(__name__)

LOOK_EVERY = 0.25  # seconds between the watchdog's looks: how late past the bound it acts at most
_BOUND = "_extproxy_statement_bound"  # marks what is already bounded


class _Waits:
    """The database waits in flight in this process, each with the moment it is given up."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[int, list[Any]] = {}  # id -> [give_up_at, psycopg connection, shut]
        self._thread: threading.Thread | None = None

    def run(self, seconds: float, raw: Any, work: Callable[[], Any]) -> tuple[Any, bool]:
        """`work()` on psycopg connection `raw`, given up past `seconds` + GRACE: its result, and
        whether the socket was shut meanwhile (then the connection is no longer usable)."""
        entry = [time.monotonic() + seconds + GRACE, raw, False]
        with self._lock:
            self._running[id(entry)] = entry
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="db-statement-watch", daemon=True)
                self._thread.start()
        try:
            return work(), entry[2]
        except Exception as exc:
            if entry[2]:
                raise DeadlinePassed(f"no answer from the database within {seconds:g} s "
                                     f"(EXTPROXY_DB_STATEMENT_DEADLINE) and {GRACE:g} s more; connection shut") from exc
            raise
        finally:
            with self._lock:  # once out, the watchdog no longer touches this connection
                self._running.pop(id(entry), None)

    def _watch(self) -> None:
        while True:
            time.sleep(LOOK_EVERY)
            now = time.monotonic()
            with self._lock:
                for entry in self._running.values():
                    if not entry[2] and entry[0] <= now:
                        entry[2] = True
                        _shut(entry[1])
                        log.error("serving process: no answer from the database within %g s; connection shut",
                                  settings.EXTPROXY_DB_STATEMENT_DEADLINE + GRACE)


_waits = _Waits()


def install() -> None:
    """In the serving process, once at start."""
    seconds = settings.EXTPROXY_DB_STATEMENT_DEADLINE
    if seconds <= 0 or connections["default"].vendor != "postgresql":
        return
    connection_created.connect(_bound_statements, weak=False, dispatch_uid=_BOUND)
    pool = connections["default"].pool  # made here if not yet (it is opened at its first use)
    check = getattr(pool, "_check", None)  # psycopg_pool keeps the `check` Django gave it there
    if check is not None and not getattr(check, _BOUND, False):
        pool._check = bounded_check(check, seconds)


def _bound_statements(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Each new (or newly taken from the pool) connection: its statements under the deadline."""
    if connection.vendor == "postgresql" and _bounded not in connection.execute_wrappers:
        connection.execute_wrappers.append(_bounded)


def _bounded(execute: Callable[..., Any], sql: Any, params: Any, many: bool, context: dict) -> Any:
    wrapper = context["connection"]
    result, shut = _waits.run(settings.EXTPROXY_DB_STATEMENT_DEADLINE, wrapper.connection,
                              lambda: execute(sql, params, many, context))
    if shut:  # it answered just as the socket was shut: the connection is not usable now
        close_quietly(wrapper)
    return result


def bounded_check(check: Callable[[Any], None], seconds: float) -> Callable[[Any], None]:
    """The pool's check of a psycopg connection, given up after `seconds` (and GRACE): the
    check raises, and the pool discards that connection and hands out another."""

    def bounded(conn: Any) -> None:
        _, shut = _waits.run(seconds, conn, lambda: check(conn))
        if shut:
            raise DeadlinePassed("the pooled connection's check was given up")

    setattr(bounded, _BOUND, True)
    return bounded


def _shut(conn: Any) -> None:
    try:
        fd = conn.pgconn.socket
    except Exception:  # closed meanwhile
        return
    shut_socket(fd)
