"""HTTP extenders: the one place that owns the outbound client, its pools and its timeouts.

aiohttp with one keep-alive connection pool per backend and event loop. Each call has one
total timeout, the backend's httpTimeout minus a margin (`proxy_timeout`), so that extproxy
still answers inside the scheduler's own timeout for the proxy entry. TLS follows the
scheduler's rules: TLS only for an https:// urlPrefix; with enableHTTPS and no CA the server
certificate is not verified; tlsConfig gives client certificate, CA and SNI server name.
Redirects are followed as Go's client follows them (at most 10).
"""
from __future__ import annotations

import asyncio
import base64
import os
import ssl
import tempfile
import warnings
from typing import Any

import aiohttp

from ..config import BackendConfig
from .base import Backend, Exchange, now

# aiohttp warns for bodies over 1 MiB; a full-mode NodeList is larger, and handing the transport
# the bytes at once is what we want (it buffers them; no read loop blocks).
warnings.filterwarnings("ignore", "Sending a large body directly", ResourceWarning)

POOL_SIZE = 64  # connections per backend and process; more callers wait for a free one


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
        self._ssl = ssl_context(config)
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
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

    async def exchange(self, verb: str, verb_string: str, body: bytes) -> Exchange:
        started = now()
        extra: dict[str, Any] = {}
        if self.config.tls_config and self.config.tls_config.server_name:
            extra["server_hostname"] = self.config.tls_config.server_name
        try:
            async with self._session().post(self.url_for(verb_string), data=body, max_redirects=10, **extra) as resp:
                data = await resp.read()
                return Exchange(started, now(), resp.status, data, resp.headers.get("Content-Type", ""))
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            return Exchange(started, now(), None, error=f"no answer within {self.timeout:g}s", timed_out=True)
        except aiohttp.ClientError as exc:
            return Exchange(started, now(), None, error=_describe(exc))
        except (OSError, ssl.SSLError, ValueError) as exc:
            return Exchange(started, now(), None, error=f"{type(exc).__name__}: {exc}")

    async def close(self) -> None:
        for session in self._sessions.values():
            if not session.closed:
                await session.close()
        self._sessions.clear()


def _describe(exc: aiohttp.ClientError) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"connection failed: {exc.os_error or exc}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the backend closed the connection without an answer"
    if isinstance(exc, aiohttp.TooManyRedirects):
        return "stopped after 10 redirects"
    return f"{type(exc).__name__}: {exc}"
