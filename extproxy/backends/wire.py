"""A minimal HTTP/1.1 keep-alive client for backend calls: one POST, one reply, bytes in and out.

The hot path needs exactly this: write the request head and the scheduler's bytes, parse the
reply head once (httptools, the parser uvicorn uses), hand the body back. A general client
(aiohttp) costs several times more CPU per call in its request/response objects, header
multidicts and stream readers (bench/hop_costs.py measures both); this module owns only the
connections, their pools and the parsing, nothing about extenders.

- Pools (pool.py): per (host, port, TLS) and event loop, LIFO idle connections, at most `limit`
  open; idle ones older than `keepalive` seconds are closed. A request that fails on a reused
  connection before any reply byte arrived (the server closed it while idle) is retried once on
  a new connection, as Go's transport does for a replayable body.
- Replies: Content-Length, chunked, or read-until-close bodies; gzip/deflate decoded (not asked
  for, but accepted). At most `limit` bytes are buffered: beyond, the caller gets the first
  part and a stream of the rest with flow control (reading pauses while the consumer lags).
- Relaying (`relay` bytes, for callers that pass the reply on): a reply of at least that many
  bytes (by Content-Length, or of unknown length) whose body is not all there with its head is
  returned at its head, the whole body as a stream (`Reply.relayed`), so the caller can send
  each part on as it arrives instead of after the last one.
- Redirects: followed like Go's client (at most 10; 307/308 keep the POST, 301/302/303 turn into
  a GET without body).
- A body still arriving (`post_feed`, a feed.BodyFeed): the head and the parts so far are
  written at once, each later part as it arrives. A reply head that comes before the body's last
  part ends the passing on, and that connection is closed after the reply (a backend that
  answers early may not read the rest). A redirect waits for the whole body and sends it whole.
- Begun (`begin`): a POST written at once, without awaiting, on an idle connection; its reply is
  read whole by the caller's callbacks when it is plain (`Sent`), else by `post(..., sent=)`.
- Timeouts are the caller's (asyncio.timeout around the whole exchange, body included).
"""
from __future__ import annotations

import base64
import ssl
import zlib
from dataclasses import dataclass
from typing import AsyncGenerator, Callable
from urllib.parse import urljoin, urlsplit

from .connection import Closed, ConnectFailed, Connection, TooManyRedirects, WireError
from .feed import BodyFeed
from .pool import Pool

__all__ = ["Client", "Closed", "ConnectFailed", "Reply", "Sent", "Target", "TooManyRedirects", "WireError"]

REDIRECTS = (301, 302, 303, 307, 308)


@dataclass(slots=True)
class Target:
    """One request line and Host: what a URL means for the wire."""

    scheme: str
    host: str
    port: int
    path: bytes
    host_header: bytes
    auth: bytes | None

    @classmethod
    def parse(cls, url: str) -> "Target":
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        default = 443 if parts.scheme == "https" else 80
        port = parts.port or default
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.hostname
        shown = f"[{host}]" if ":" in host else host
        host_header = shown if port == default else f"{shown}:{port}"
        auth = None
        if parts.username is not None:
            pair = f"{parts.username}:{parts.password or ''}".encode()
            auth = b"Basic " + base64.b64encode(pair)
        return cls(parts.scheme, host, port, path.encode("latin-1"), host_header.encode("latin-1"), auth)

    def head(self, method: bytes, length: int | None) -> bytes:
        lines = [method + b" " + self.path + b" HTTP/1.1", b"Host: " + self.host_header]
        if self.auth is not None:
            lines.append(b"Authorization: " + self.auth)
        if length is not None:
            lines += [b"Content-Type: application/json", b"Content-Length: " + str(length).encode()]
        return b"\r\n".join(lines) + b"\r\n\r\n"


@dataclass(slots=True)
class Sent:
    """A POST that `Client.begin` wrote; its reply is read here when it is plain (`plain`,
    then `reply`), else by `Client.post(..., sent=)`, which does everything a reply may need."""

    pool: Pool
    conn: Connection

    def plain(self, limit: int, relay: int) -> bool:
        """Whether the reply's head (read) says it is read whole here: no redirect, no
        Content-Encoding, and a Content-Length below `relay` and at most `limit`."""
        conn = self.conn
        if conn.status in REDIRECTS and conn.header(b"location") is not None:
            return False
        if (conn.header(b"content-encoding") or b"identity").lower() != b"identity":
            return False
        length = conn.content_length()
        return length is not None and length < relay and length <= limit

    def reply(self) -> Reply:
        """The whole reply of a plain exchange (`plain`, and the connection's reply complete);
        the connection goes back to its pool."""
        conn = self.conn
        body = conn.take_body()
        self.pool.release(conn)
        return Reply(conn.status, (conn.header(b"content-type") or b"").decode("latin-1"), body, len(body))

    def drop(self) -> None:
        """Given up (the deadline passed): the connection is closed, its slot freed."""
        _drop(self.pool, self.conn)


@dataclass(slots=True)
class Reply:
    """A reply whose head is read; `first` holds the body or its first `limit` bytes."""

    status: int
    content_type: str
    first: bytes
    length: int | None  # the Content-Length (None: chunked or until close)
    rest: AsyncGenerator[bytes, None] | None = None  # the body after `first`, when streamed
    over_limit: int = 0  # body bytes seen when the body was over the limit (and not streamed)
    relayed: bool = False  # returned at its head: `first` is empty and `rest` is the whole body


class Client:
    """POSTs to URLs over pooled connections, per event loop; see the module docstring."""

    def __init__(self, ssl_context: ssl.SSLContext | None, server_hostname: str | None = None,
                 limit: int = 64, keepalive: float = 60.0) -> None:
        self._ssl = ssl_context
        self._server_hostname = server_hostname
        self._limit = limit
        self._keepalive = keepalive
        self._pools: dict[tuple[str, str, int], Pool] = {}
        self._targets: dict[str, Target] = {}

    def target(self, url: str) -> Target:
        target = self._targets.get(url)
        if target is None:
            target = self._targets[url] = Target.parse(url)
        return target

    def _pool(self, target: Target) -> Pool:
        key = (target.scheme, target.host, target.port)
        pool = self._pools.get(key)
        if pool is None:
            ctx = self._ssl if target.scheme == "https" else None
            if target.scheme == "https" and ctx is None:
                ctx = ssl.create_default_context()
            pool = self._pools[key] = Pool(target.host, target.port, ctx, self._server_hostname, self._limit, self._keepalive)
        return pool

    def begin(self, url: str, body: bytes) -> Sent | None:
        """Write a POST now, without awaiting, on an idle pooled connection; None when no
        connection is idle or no slot is free (then `post` is the way). Its reply: `Sent`."""
        target = self.target(url)
        pool = self._pool(target)
        conn = pool.take_idle()
        if conn is None:
            return None
        conn.send(target.head(b"POST", len(body)), body)
        return Sent(pool, conn)

    async def post(self, url: str, body: bytes | None, limit: int, stream: bool, relay: int = 0,
                   method: bytes = b"POST", hops: int = 11, sent: Sent | None = None) -> Reply:
        """One POST (redirects followed). Over `limit` bytes: `rest` when `stream`, else the
        first part and overflow are returned with `rest` None and the connection dropped.
        `relay` > 0 (with `stream`): a large reply comes back at its head (module docstring).
        `sent`: `begin` already wrote this POST to `url`; its reply is read from there on."""
        payload_or_none = body
        for _ in range(hops):
            target = self.target(url)
            pool = self._pool(target)
            conn = await self._send(
                pool, target.head(method, len(payload_or_none) if payload_or_none is not None else None), payload_or_none,
                sent.conn if sent is not None else None,
            )
            sent = None
            try:
                location = conn.header(b"location")
                if conn.status in REDIRECTS and location is not None:
                    await conn.read_at_most(1 << 20)  # the redirect's own body is dropped
                    pool.release(conn)
                    url = urljoin(url, location.decode("latin-1"))
                    if conn.status in (301, 302, 303):
                        method, payload_or_none = b"GET", None
                    continue
                return await self._reply(pool, conn, limit, stream, relay)
            except BaseException:
                _drop(pool, conn)
                raise
        raise TooManyRedirects("stopped after 10 redirects")

    async def post_feed(self, url: str, feed: BodyFeed, limit: int, stream: bool, relay: int = 0) -> Reply:
        """`post` of a body that is still arriving (module docstring)."""
        target = self.target(url)
        pool = self._pool(target)
        conn = await self._send_feed(pool, target.head(b"POST", feed.length), feed)
        try:
            if not feed.complete:
                conn.close_after = True  # answered early: the backend may not read the rest
            location = conn.header(b"location")
            if not (conn.status in REDIRECTS and location is not None):
                return await self._reply(pool, conn, limit, stream, relay)
            await conn.read_at_most(1 << 20)  # the redirect's own body is dropped
        except BaseException:
            _drop(pool, conn)
            raise
        pool.release(conn)
        url = urljoin(url, location.decode("latin-1"))
        if conn.status in (301, 302, 303):
            return await self.post(url, None, limit, stream, relay, method=b"GET", hops=10)
        return await self.post(url, await feed.whole(), limit, stream, relay, hops=10)

    async def _send_feed(self, pool: Pool, head: bytes, feed: BodyFeed) -> Connection:
        """As `_send`; the retry on a fresh connection writes the parts so far again."""
        for fresh in (False, True):
            conn = await pool.acquire(fresh)
            reused = conn.used > 0
            sink = _writer(conn)
            try:
                conn.send(head, None)
                feed.attach(sink)
                await conn.read_head()
                return conn
            except Closed as exc:
                _drop(pool, conn)
                if fresh or not (reused and not exc.got_bytes):
                    raise
            except BaseException:
                _drop(pool, conn)
                raise
            finally:
                feed.detach(sink)
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _send(self, pool: Pool, head: bytes, body: bytes | None, sent: Connection | None = None) -> Connection:
        """Write the request (unless it is `sent` already, on that connection) and read the reply's head."""
        conn = sent if sent is not None else await pool.acquire()
        reused = conn.used > (1 if sent is not None else 0)  # `send` counts the exchange it starts
        try:
            if sent is None:
                conn.send(head, body)
            await conn.read_head()
            return conn
        except Closed as exc:
            _drop(pool, conn)
            if not (reused and not exc.got_bytes):
                raise
        except BaseException:
            _drop(pool, conn)
            raise
        # The server closed an idle connection as we reused it: once more on a new one.
        conn = await pool.acquire(fresh=True)
        try:
            conn.send(head, body)
            await conn.read_head()
            return conn
        except BaseException:
            _drop(pool, conn)
            raise

    async def _reply(self, pool: Pool, conn: Connection, limit: int, stream: bool, relay: int) -> Reply:
        content_type = (conn.header(b"content-type") or b"").decode("latin-1")
        encoding = (conn.header(b"content-encoding") or b"identity").lower()
        length = conn.content_length() if encoding == b"identity" else None
        if stream and relay and encoding == b"identity" and not conn.complete and (length is None or length >= relay):
            return Reply(conn.status, content_type, b"", length, rest=_streamed(pool, conn, b""), relayed=True)
        first, overflow = await conn.read_at_most(limit)
        if overflow is None:
            pool.release(conn)
            return Reply(conn.status, content_type, _decoded(first, encoding), length, None)
        if not stream or encoding != b"identity":
            _drop(pool, conn)
            return Reply(conn.status, content_type, first, length, over_limit=len(first) + len(overflow))
        return Reply(conn.status, content_type, first, length, rest=_streamed(pool, conn, overflow))

    @property
    def in_use(self) -> int:
        """Connections held by exchanges now, over all pools."""
        return sum(pool.in_use for pool in self._pools.values())

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


def _writer(conn: Connection) -> Callable[[bytes], None]:
    """What passes a request's parts to `conn`: nothing once it is closing (the attempt failed)."""
    transport = conn.transport
    assert transport is not None

    def write(part: bytes) -> None:
        if not transport.is_closing():
            transport.write(part)

    return write


def _drop(pool: Pool, conn: Connection) -> None:
    conn.close()
    pool.release(conn)


async def _streamed(pool: Pool, conn: Connection, overflow: bytes) -> AsyncGenerator[bytes, None]:
    try:
        if overflow:
            yield overflow
        async for chunk in conn.rest():
            yield chunk
    finally:
        pool.release(conn)  # closed instead when the reply was not read to its end


def _decoded(data: bytes, encoding: bytes) -> bytes:
    if encoding == b"identity" or not data:
        return data
    try:
        if encoding in (b"gzip", b"x-gzip"):
            return zlib.decompress(data, 16 + zlib.MAX_WBITS)
        if encoding == b"deflate":
            try:
                return zlib.decompress(data)
            except zlib.error:
                return zlib.decompress(data, -zlib.MAX_WBITS)
    except zlib.error as exc:
        raise WireError(f"bad {encoding.decode()} body: {exc}") from None
    raise WireError(f"unsupported Content-Encoding {encoding.decode()!r}")
