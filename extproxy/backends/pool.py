"""One pool of keep-alive connections to a backend (wire.py's): idle ones and the bound.

Owns which connection an exchange gets (the latest idle one still usable and younger than
`keepalive`, else a new one), and the bound of `limit` connections out at once, with the slots
counted here so that `take_idle` can take one without awaiting (the extender listener's calls
begun without a task, wire.Client.begin). Nothing about requests or replies: wire.py's.
"""
from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque

from .connection import ConnectFailed, Connection


class Pool:
    """Idle keep-alive connections to one (host, port, TLS) on one event loop."""

    def __init__(self, host: str, port: int, ssl_context: ssl.SSLContext | None, server_hostname: str | None,
                 limit: int, keepalive: float) -> None:
        self.host, self.port = host, port
        self._ssl = ssl_context
        self._server_hostname = server_hostname
        self._idle: list[Connection] = []
        # At most `limit` connections out at once. Counted here rather than by an asyncio.Semaphore
        # so that `take_idle` can take a slot without awaiting; a freed slot goes to the longest
        # waiter directly (first come, first served).
        self._limit = self._free = limit
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._keepalive = keepalive

    async def acquire(self, fresh: bool = False) -> Connection:
        await self._take_slot()
        try:
            conn = self._idle_connection() if not fresh else None
            if conn is None:
                conn = await self._connect()
        except BaseException:
            self._give_slot()
            raise
        conn.holds_slot = True
        return conn

    @property
    def in_use(self) -> int:
        """Connections out of the pool now (held by an exchange, or being opened for one)."""
        return self._limit - self._free

    def take_idle(self) -> Connection | None:
        """An idle connection and its slot, now, or None (none idle, or no slot free); never waits."""
        if self._free <= 0:
            return None
        conn = self._idle_connection()
        if conn is None:
            return None
        self._free -= 1
        conn.holds_slot = True
        return conn

    async def _take_slot(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # resolved by _give_slot: the slot is handed over, _free untouched
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._give_slot()  # handed over, then this task was cancelled: pass it on
            elif waiter in self._waiters:  # (a slot freed meanwhile skipped it, and took it out)
                self._waiters.remove(waiter)
            raise

    def _give_slot(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1

    def _idle_connection(self) -> Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if conn.usable and now - conn.idle_since < self._keepalive:
                return conn
            conn.close()
        return None

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        server_hostname = (self._server_hostname or self.host) if self._ssl is not None else None
        try:
            _, conn = await loop.create_connection(
                lambda: Connection(loop), self.host, self.port, ssl=self._ssl, server_hostname=server_hostname
            )
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"connection failed: {exc}") from None
        return conn

    def release(self, conn: Connection) -> None:
        """Back to the pool when the reply was read to its end; otherwise closed. Idempotent."""
        if not conn.holds_slot:
            return
        conn.holds_slot = False
        if conn.reusable:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()
        self._give_slot()

    def close(self) -> None:
        for conn in self._idle:
            conn.close_now()
        self._idle.clear()
