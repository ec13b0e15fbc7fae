"""HTTP extenders: the one place that owns the outbound client, its pools and its timeouts.

A minimal keep-alive client (wire.py) with one connection pool per backend and event loop. Each call has one
total timeout, the backend's httpTimeout minus a margin (`proxy_timeout`), so that extproxy
still answers inside the scheduler's own timeout for the proxy entry. TLS follows the
scheduler's rules: TLS only for an https:// urlPrefix; with enableHTTPS and no CA the server
certificate is not verified; tlsConfig gives client certificate, CA and SNI server name.
Redirects are followed as Go's client follows them (at most 10).
At most EXTPROXY_MAX_REPLY_BYTES of a reply are held in memory: beyond that the caller gets
the first part and, when it asked for a stream, the rest as it arrives; otherwise the call fails.
A caller that asks for a stream (the per-backend form) gets a reply of RELAY_BYTES or more at its
head, with the body as it arrives (cut-through), and the record keeps up to the bound of it.
"""
from __future__ import annotations

import asyncio
import base64
import os
import ssl
import tempfile
import threading
from typing import Any, AsyncGenerator, Callable, Coroutine

from django.core.exceptions import ImproperlyConfigured

from .. import metrics
from ..aside import aside
from ..config import BackendConfig
from ..protocol import Verb
from .base import Backend, Exchange, StreamBroken, incomplete_finding, now, truncated_finding
from .feed import BodyFeed
from .wire import Client, Sent, WireError

POOL_SIZE = 64  # connections per backend and process; more callers wait for a free one
DEFAULT_MAX_REPLY_BYTES = 64 * 1024 * 1024
# Replies from this size on are passed on as they arrive. Below it a reply comes in one or two
# reads, and passing it on whole costs one write instead of one per part.
RELAY_BYTES = 256 * 1024


def proxy_timeout(http_timeout: float) -> float:
    """The backend's budget inside the scheduler's: 10 percent margin, between 50 and 500 ms."""
    margin = min(0.5, max(0.05, http_timeout * 0.1))
    return max(0.01, http_timeout - margin)


def ssl_context(config: BackendConfig) -> ssl.SSLContext | bool:
    if not config.url_prefix.lower().startswith("https://"):
        return False
    tls = config.tls_config
    ctx = ssl.create_default_context()
    has_ca = bool(tls and (tls.ca_data or tls.ca_file))
    if (config.enable_https and not has_ca) or (tls and tls.insecure):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if tls and tls.ca_data:
        ctx.load_verify_locations(cadata=_pem_text(tls.ca_data))
    elif tls and tls.ca_file:
        ctx.load_verify_locations(cafile=tls.ca_file)
    if tls and (tls.cert_data or tls.cert_file):
        written: list[str] = []
        try:
            cert = _file_for(tls.cert_data, written) if tls.cert_data else tls.cert_file
            key = _file_for(tls.key_data, written) if tls.key_data else (tls.key_file or None)
            ctx.load_cert_chain(cert, key)
        finally:
            for path in written:  # the key must not stay on disk once loaded
                os.unlink(path)
    return ctx


def _pem_text(data: bytes) -> str:
    text = data.decode("ascii", "replace")
    return text if "-----BEGIN" in text else base64.b64decode(data).decode("ascii")


def _file_for(data: bytes, written: list[str]) -> str:
    # ssl can load a certificate chain only from a file (created 0600 by tempfile).
    handle = tempfile.NamedTemporaryFile(prefix="extproxy-tls-", suffix=".pem", delete=False)
    written.append(handle.name)
    handle.write(data)
    handle.close()
    return handle.name


class Expiry:
    """Cancels the current task at `deadline`; `expired()` then turns that cancellation into a
    timeout. What asyncio.timeout_at does for the head of the exchange, for ~2.5 instead of ~6 µs
    a call (measured in a loop on uvloop): no state machine, one timer.
    """

    __slots__ = ("_task", "_handle", "_fired")

    def __init__(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        self._task = asyncio.current_task(loop)
        self._fired = False
        self._handle = loop.call_at(deadline, self._expire)

    def _expire(self) -> None:
        self._fired = True
        if self._task is not None:
            self._task.cancel()

    def expired(self) -> bool:
        """In an `except CancelledError`: True when this deadline caused it, and nobody else
        cancelled the task meanwhile (then the cancellation must go on)."""
        return self._fired and self._task is not None and self._task.uncancel() == 0

    def cancel(self) -> None:
        self._handle.cancel()


class HTTPBackend(Backend):
    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self.timeout = proxy_timeout(config.http_timeout)
        self.max_reply_bytes = max_reply_bytes()
        self._ssl = ssl_context(config)
        self._server_hostname = config.tls_config.server_name if config.tls_config else None
        self._clients: dict[asyncio.AbstractEventLoop, Client] = {}
        self._clients_lock = threading.Lock()  # the serving loop and the heavy lane (offload.py)

    def _client(self) -> Client:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            with self._clients_lock:
                for old in [lp for lp in self._clients if lp.is_closed()]:
                    del self._clients[old]  # clients of loops that are gone (tests)
                ctx = self._ssl if isinstance(self._ssl, ssl.SSLContext) else None
                client = self._clients[loop] = Client(ctx, self._server_hostname or None, limit=POOL_SIZE)
        return client

    def timed_out(self, started: float, timeout: float | None = None) -> Exchange:
        """The Exchange of a call that got no answer within the timeout (its text is what the
        scheduler gets in Error): one place, for the call run in a task and the begun one."""
        return Exchange(started, now(), None, error=f"no answer within {timeout or self.timeout:g}s", timed_out=True)

    @property
    def connections_in_use(self) -> int:
        """Connections to this backend held by calls now, over every event loop's pool."""
        return sum(client.in_use for client in list(self._clients.values()))

    def begin(self, verb: Verb, verb_string: str, body: bytes,
              finished: Callable[[Exchange | Coroutine[Any, Any, Exchange]], None]) -> bool:
        """`exchange(..., stream=True)` started without a task, for the extender listener: the
        request is written now when a pooled connection is idle, and the reply followed by the
        connection's callbacks. `finished` gets the Exchange of a plain reply (wire.Sent.plain) or
        of no reply within the timeout; anything else (a redirect, a large or encoded reply, a
        failure, the retry of a reused connection the backend had closed) needs what `exchange`
        does, so it gets the rest of `exchange` as a coroutine to run. False: nothing was sent.

        What this saves is the task and the chain of coroutines a call otherwise runs in: names
        N=1000 p50 was 20-25 µs lower with recording off (bench/README.md, "Twelfth pass")."""
        loop = asyncio.get_running_loop()
        started = now()
        deadline = loop.time() + self.timeout
        sent = self._client().begin(self.url_for(verb_string), body)
        if sent is None:
            return False
        aside.sent()  # as `exchange` does once its request is written
        _Awaited(self, verb, verb_string, body, sent, started, deadline, finished)
        return True

    async def exchange_feed(self, verb: Verb, verb_string: str, feed: BodyFeed, *, stream: bool = False) -> Exchange:
        """The request is sent on as it arrives (feed.py); its deadline starts at its head."""
        return await self.exchange(verb, verb_string, feed, stream=stream)

    async def exchange(self, verb: Verb, verb_string: str, body: bytes | BodyFeed, *, stream: bool = False,
                       timeout: float | None = None, sent: Sent | None = None, started: float | None = None,
                       deadline: float | None = None) -> Exchange:
        """One call. `sent`, `started`, `deadline`: the rest of a call that `begin` started."""
        started = now() if started is None else started
        loop = asyncio.get_running_loop()
        budget = self.timeout if timeout is None else timeout
        deadline = loop.time() + budget if deadline is None else deadline
        if not isinstance(body, BodyFeed) and sent is None:
            # The loop's bookkeeping runs while this request is with the backend. A feed's is
            # run when its last part is written (the listener): at its head, it would compete
            # with the request's own parts still arriving.
            aside.sent()
        expiry = Expiry(loop, deadline)
        try:
            if not isinstance(body, BodyFeed):
                reply = await self._client().post(self.url_for(verb_string), body, self.max_reply_bytes, stream, RELAY_BYTES,
                                                  sent=sent)
            else:
                reply = await self._client().post_feed(self.url_for(verb_string), body, self.max_reply_bytes, stream, RELAY_BYTES)
        except asyncio.CancelledError:
            if not expiry.expired():
                raise
            return self.timed_out(started, budget)
        except WireError as exc:
            return Exchange(started, now(), None, error=str(exc))
        except (OSError, ssl.SSLError, ValueError) as exc:
            return Exchange(started, now(), None, error=f"{type(exc).__name__}: {exc}")
        finally:
            expiry.cancel()
        if reply.over_limit:
            limit = self.max_reply_bytes
            if self.observed:  # not a replay's (Backend.observed)
                metrics.REPLIES_TRUNCATED.labels(self.name).inc()
            return Exchange(
                started, now(), None, reply.first, reply.content_type,
                error=f"reply larger than {limit} bytes (EXTPROXY_MAX_REPLY_BYTES)",
                findings=[truncated_finding(reply.over_limit, limit, "not read further: combining needs a whole reply")],
            )
        exchange = Exchange(started, now(), reply.status, reply.first, reply.content_type, length=reply.length)
        if reply.rest is not None:
            exchange.rest = self._rest(reply.rest, exchange, deadline, budget)
        return exchange

    async def _rest(self, rest: AsyncGenerator[bytes, None], exchange: Exchange, deadline: float,
                    budget: float) -> AsyncGenerator[bytes, None]:
        """The rest of a streamed reply (after `exchange.body`, its first part), within the call's
        deadline. Completes the exchange: the body kept up to the bound, when it finished, how it
        failed, and reply-truncated when it was over the bound."""
        limit = self.max_reply_bytes
        kept = [exchange.body] if exchange.body else []
        room = limit - len(exchange.body)
        total = len(exchange.body)
        complete = False
        try:
            while True:
                async with asyncio.timeout_at(deadline):
                    try:
                        chunk = await rest.__anext__()
                    except StopAsyncIteration:
                        break
                total += len(chunk)
                if room > 0:
                    kept.append(chunk if len(chunk) <= room else chunk[:room])
                    room -= len(chunk)
                yield chunk
            complete = True
        except TimeoutError:
            exchange.error, exchange.timed_out = f"no complete answer within {budget:g}s", True
            raise StreamBroken(exchange.error) from None
        except (WireError, OSError) as exc:
            exchange.error = f"the reply broke off: {exc}"
            raise StreamBroken(exchange.error) from None
        finally:
            await rest.aclose()
            exchange.finished_at = now()
            if not complete:
                if not exchange.error:
                    exchange.error = "the scheduler's connection closed before the end of the reply"
                exchange.findings.append(incomplete_finding(total, exchange.length, exchange.error))
            exchange.body, exchange.kept = b"", kept  # joined by the record (Exchange.recorded_body)
            if total > limit:
                exchange.findings.append(
                    truncated_finding(total, limit, "" if complete else "the reply broke off before its end")
                )
                if self.observed:  # not a replay's (Backend.observed)
                    metrics.REPLIES_TRUNCATED.labels(self.name).inc()

    async def close(self) -> None:
        current = asyncio.get_running_loop()
        with self._clients_lock:
            clients, self._clients = self._clients, {}
        for loop, client in clients.items():
            if loop is current or loop.is_closed():
                client.close()
            else:  # the heavy lane's: its connections are closed on its own loop
                loop.call_soon_threadsafe(client.close)
        await asyncio.sleep(0)  # the aborted connections' connection_lost runs before the loop stops


class _Awaited:
    """The reply to a request `HTTPBackend.begin` wrote, followed by its connection's callbacks
    (Connection.watcher) until it is whole and plain, needs `exchange` (see `begin`), or the
    deadline passes; then `finished` is called once."""

    __slots__ = ("backend", "verb", "verb_string", "body", "sent", "started", "deadline", "finished", "_timer")

    def __init__(self, backend: HTTPBackend, verb: Verb, verb_string: str, body: bytes, sent: Sent, started: float,
                 deadline: float, finished: Callable[[Exchange | Coroutine[Any, Any, Exchange]], None]) -> None:
        self.backend, self.verb, self.verb_string, self.body, self.sent = backend, verb, verb_string, body, sent
        self.started, self.deadline, self.finished = started, deadline, finished
        self._timer = asyncio.get_running_loop().call_at(deadline, self._expired)
        sent.conn.watcher = self._check

    def _check(self) -> None:
        conn = self.sent.conn
        plain = False
        if not conn.failed:
            if not conn.status:
                return  # the head is not whole yet
            plain = self.sent.plain(self.backend.max_reply_bytes, RELAY_BYTES)
            if plain and not conn.complete:
                return  # a plain body still arriving
        self._stop()
        if plain:
            reply = self.sent.reply()
            self.finished(Exchange(self.started, now(), reply.status, reply.first, reply.content_type, length=reply.length))
        else:
            self.finished(self.backend.exchange(self.verb, self.verb_string, self.body, stream=True, sent=self.sent,
                                                started=self.started, deadline=self.deadline))

    def _expired(self) -> None:
        self._stop()
        self.sent.drop()
        self.finished(self.backend.timed_out(self.started))

    def _stop(self) -> None:
        self.sent.conn.watcher = None
        self._timer.cancel()


def max_reply_bytes() -> int:
    """EXTPROXY_MAX_REPLY_BYTES (its default outside Django, e.g. in tools)."""
    try:
        from django.conf import settings

        return int(settings.EXTPROXY_MAX_REPLY_BYTES)
    except (ImportError, AttributeError, ImproperlyConfigured):
        return DEFAULT_MAX_REPLY_BYTES
