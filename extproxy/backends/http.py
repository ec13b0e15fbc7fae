"""HTTP extenders: the one place that owns the outbound client, its pools and its timeouts.

aiohttp with one keep-alive connection pool per backend and event loop. Each call has one
total timeout, the backend's httpTimeout minus a margin (`proxy_timeout`), so that extproxy
still answers inside the scheduler's own timeout for the proxy entry. TLS follows the
scheduler's rules: TLS only for an https:// urlPrefix; with enableHTTPS and no CA the server
certificate is not verified; tlsConfig gives client certificate, CA and SNI server name.
Redirects are followed as Go's client follows them (at most 10).
At most EXTPROXY_MAX_REPLY_BYTES of a reply are held in memory: beyond that the caller gets
the first part and, when it asked for a stream, the rest as it arrives; otherwise the call fails.
"""
from __future__ import annotations

import asyncio
import base64
import os
import ssl
import tempfile
import threading
import warnings
from typing import Any, AsyncGenerator

import aiohttp
from django.core.exceptions import ImproperlyConfigured

from .. import metrics
from ..config import BackendConfig
from .base import Backend, Exchange, StreamBroken, now, truncated_finding

# aiohttp warns for bodies over 1 MiB; a full-mode NodeList is larger, and handing the transport
# the bytes at once is what we want (it buffers them; no read loop blocks).
warnings.filterwarnings("ignore", "Sending a large body directly", ResourceWarning)

POOL_SIZE = 64  # connections per backend and process; more callers wait for a free one
DEFAULT_MAX_REPLY_BYTES = 64 * 1024 * 1024


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


class HTTPBackend(Backend):
    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self.timeout = proxy_timeout(config.http_timeout)
        self.max_reply_bytes = max_reply_bytes()
        self._ssl = ssl_context(config)
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
        self._sessions_lock = threading.Lock()  # the serving loop and the heavy lane (offload.py)

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            with self._sessions_lock:
                return self._new_session(loop)
        return session

    def _new_session(self, loop: asyncio.AbstractEventLoop) -> aiohttp.ClientSession:
        for old in [lp for lp in self._sessions if lp.is_closed()]:
            del self._sessions[old]  # sessions of loops that are gone (tests)
        connector = aiohttp.TCPConnector(limit=POOL_SIZE, ssl=self._ssl, keepalive_timeout=60)
        session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            headers={"Content-Type": "application/json"},
            skip_auto_headers=("User-Agent",),
        )
        self._sessions[loop] = session
        return session

    async def exchange(self, verb: str, verb_string: str, body: bytes, *, stream: bool = False) -> Exchange:
        started = now()
        extra: dict[str, Any] = {}
        if self.config.tls_config and self.config.tls_config.server_name:
            extra["server_hostname"] = self.config.tls_config.server_name
        resp: aiohttp.ClientResponse | None = None
        try:
            resp = await self._session().post(self.url_for(verb_string), data=body, max_redirects=10, **extra)
            content_type = resp.headers.get("Content-Type", "")
            length = resp.content_length if "Content-Encoding" not in resp.headers else None
            if length is not None and length <= self.max_reply_bytes:
                data = await resp.read()  # the common case: known to fit
                return Exchange(started, now(), resp.status, data, content_type)
            first, overflow = await _read_at_most(resp, self.max_reply_bytes)
            if overflow is None:
                return Exchange(started, now(), resp.status, first, content_type)
            if not stream:
                resp.close()  # the rest is not wanted: drop the connection instead of reading it
                limit = self.max_reply_bytes
                metrics.REPLIES_TRUNCATED.labels(self.name).inc()
                return Exchange(
                    started, now(), None, first, content_type,
                    error=f"reply larger than {limit} bytes (EXTPROXY_MAX_REPLY_BYTES)",
                    findings=[truncated_finding(limit + len(overflow), limit, "not read further: combining needs a whole reply")],
                )
            exchange = Exchange(started, started, resp.status, first, content_type, length=length)
            exchange.rest = self._rest(resp, exchange, overflow)
            resp = None  # owned by the stream now
            return exchange
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            return Exchange(started, now(), None, error=f"no answer within {self.timeout:g}s", timed_out=True)
        except aiohttp.ClientError as exc:
            return Exchange(started, now(), None, error=_describe(exc))
        except (OSError, ssl.SSLError, ValueError) as exc:
            return Exchange(started, now(), None, error=f"{type(exc).__name__}: {exc}")
        finally:
            if resp is not None:
                resp.release()

    async def _rest(self, resp: aiohttp.ClientResponse, exchange: Exchange, overflow: bytes) -> AsyncGenerator[bytes, None]:
        """The remainder of a reply over the bound, chunk by chunk; the exchange is completed at its end."""
        total = len(exchange.body) + len(overflow)
        complete = False
        try:
            yield overflow
            async for chunk in resp.content.iter_any():
                total += len(chunk)
                yield chunk
            complete = True
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            exchange.error, exchange.timed_out = f"no complete answer within {self.timeout:g}s", True
            raise StreamBroken(exchange.error) from None
        except (aiohttp.ClientError, OSError) as exc:
            exchange.error = f"the reply broke off: {type(exc).__name__}: {exc}"
            raise StreamBroken(exchange.error) from None
        finally:
            exchange.finished_at = now()
            exchange.findings.append(
                truncated_finding(total, len(exchange.body), "" if complete else "the reply broke off before its end")
            )
            metrics.REPLIES_TRUNCATED.labels(self.name).inc()
            if complete:
                resp.release()
            else:
                resp.close()  # a half-read reply cannot be reused

    async def close(self) -> None:
        current = asyncio.get_running_loop()
        with self._sessions_lock:
            sessions, self._sessions = self._sessions, {}
        for loop, session in sessions.items():
            if session.closed:
                continue
            if loop is current:
                await session.close()
            elif loop.is_running():  # the heavy lane's: closed on its own loop
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(session.close(), loop))


async def _read_at_most(resp: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bytes | None]:
    """(first part, overflow): the whole reply and None when it fits in `limit` bytes; else the
    first `limit` bytes and the piece read beyond them (the rest stays unread)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        if size + len(chunk) > limit:
            keep = limit - size
            parts.append(chunk[:keep])
            return b"".join(parts), chunk[keep:]
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts), None


def max_reply_bytes() -> int:
    """EXTPROXY_MAX_REPLY_BYTES (its default outside Django, e.g. in tools)."""
    try:
        from django.conf import settings

        return int(settings.EXTPROXY_MAX_REPLY_BYTES)
    except (ImportError, AttributeError, ImproperlyConfigured):
        return DEFAULT_MAX_REPLY_BYTES


def _describe(exc: aiohttp.ClientError) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"connection failed: {exc.os_error or exc}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the backend closed the connection without an answer"
    if isinstance(exc, aiohttp.TooManyRedirects):
        return "stopped after 10 redirects"
    return f"{type(exc).__name__}: {exc}"
