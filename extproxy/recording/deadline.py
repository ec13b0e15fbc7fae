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

The process's stop event ends a wait in progress the same way, at once: a SIGTERM's stop window
(`manage.py recorder --stop-drain-seconds`, inside the pod's grace period) would otherwise wait
for the deadline, and kubelet's SIGKILL end the process first (`Abandoned`).

SQLite has no server that can hang, and its busy timeout (settings.py) bounds a wait on a lock:
nothing is done there.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from types import TracebackType
from typing import Any, Callable

log = logging.getLogger(__name__)

GRACE = 1.0  # seconds the watchdog waits past the deadline for the server's statement_timeout
STOP_POLL = 0.1  # seconds between the watchdog's looks at the process's stop event


class DeadlinePassed(Exception):
    """The database did not answer within the deadline: an outage, not a refusal of the data."""


class Abandoned(Exception):
    """The process is stopping (its stop event was set) while the database work was in progress:
    the connection was shut; what was being stored stays where it came from (the spool)."""


class Deadline:
    """`with Deadline(seconds, wrapper, stop):` the database work inside, on Django connection
    `wrapper` (the thread's own, not the proxy), gives up after `seconds` (0: no bound), or at
    once when the event `stop` is set: a SIGTERM's stop window must not wait for the deadline
    (a minute by default, past the pod's grace period) while the database does not answer.
    `label` names the loop in the log."""

    def __init__(self, seconds: float, wrapper: Any, stop: threading.Event | None = None,
                 label: str = "recorder") -> None:
        postgresql = wrapper.vendor == "postgresql"
        self.seconds = seconds if postgresql else 0.0
        self.stop = stop if postgresql else None
        self.wrapper = wrapper
        self.label = label
        self.passed = False  # shut at the deadline
        self.abandoned = False  # shut because the process is stopping
        self._lock = threading.Lock()
        self._done = False
        self._finished = threading.Event()

    def __enter__(self) -> Deadline:
        if self.seconds > 0 or self.stop is not None:
            threading.Thread(target=self._watch, name="db-deadline", daemon=True).start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._lock:  # once past this, the watchdog touches the connection no more
            self._done = True
        self._finished.set()
        shut = self.passed or self.abandoned
        if shut and exc is not None and not isinstance(exc, (DeadlinePassed, Abandoned)):
            if self.abandoned:
                raise Abandoned("the process is stopping: the database work in progress was given up "
                                "(connection shut)") from exc
            raise DeadlinePassed(f"no answer from the database within {self.seconds:g} s "
                                 f"(EXTPROXY_DB_STATEMENT_DEADLINE) and {GRACE:g} s more; connection shut") from exc
        if shut and exc is None:  # it answered just as the socket was shut: not usable now
            close_quietly(self.wrapper)

    def set_server_limit(self) -> None:
        """Inside the transaction: each of its statements also ends on the server at the deadline."""
        if self.seconds > 0:
            with self.wrapper.cursor() as cursor:
                cursor.execute("SET LOCAL statement_timeout = %s", [max(1, round(self.seconds * 1000))])

    def _watch(self) -> None:
        """Until the work is done: shut the socket at the deadline, or as soon as `stop` is set."""
        give_up = time.monotonic() + self.seconds + GRACE if self.seconds > 0 else None
        while True:
            left = STOP_POLL if give_up is None else max(0.0, give_up - time.monotonic())
            if self._finished.wait(left if self.stop is None else min(left, STOP_POLL)):
                return
            stopping = self.stop is not None and self.stop.is_set()
            if not stopping and (give_up is None or time.monotonic() < give_up):
                continue
            if self._shut(stopping):
                return
            if give_up is not None:  # connecting (libpq's connect_timeout bounds that): looked at again soon
                give_up = time.monotonic() + 1.0

    def _shut(self, stopping: bool) -> bool:
        """Shut the connection's socket; False while it has none yet (connecting)."""
        with self._lock:
            if self._done:
                return True
            raw = getattr(self.wrapper, "connection", None)  # psycopg's, None while connecting
            try:
                fd = raw.pgconn.socket if raw is not None else -1
            except Exception:  # closed meanwhile
                fd = -1
            if fd < 0:
                return False
            if stopping:
                self.abandoned = True
            else:
                self.passed = True
            shut_socket(fd)
        if stopping:
            log.warning("%s: stopping; the database work in progress given up, connection shut", self.label)
        else:
            log.error("%s: no answer from the database within %g s; connection shut", self.label,
                      self.seconds + GRACE)
        return True


def shut_socket(fd: int) -> None:
    """Shut the socket behind descriptor `fd` both ways, through a duplicate of the descriptor
    (shutdown acts on the socket both name), so a wait in progress on it sees the end of the
    stream; the owner's descriptor stays its own to close."""
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:  # closed meanwhile
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # the peer closed it already
        pass
    finally:
        sock.close()


def each_statement(seconds: float, wrapper: Any, stop: threading.Event | None = None,
                   label: str = "recorder") -> Callable[..., Any]:
    """For `wrapper.execute_wrapper(...)`: every statement run inside gets its own Deadline."""
    def bounded(execute: Callable[..., Any], sql: Any, params: Any, many: bool, context: Any) -> Any:
        with Deadline(seconds, wrapper, stop, label):
            return execute(sql, params, many, context)
    return bounded


def close_quietly(wrapper: Any) -> None:
    """Close a Django connection that may be broken (it is opened again at its next use)."""
    try:
        wrapper.close()
    except Exception:  # closing a shut connection may fail too
        pass
