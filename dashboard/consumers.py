"""The live stream: one consumer, one group ("calls") fed by the recorder after each commit.

Messages to the browser (DESIGN.md): {"type": "calls/add", "payload": call} for a single
call, {"type": "calls/batch", "payload": [call, ...]} for several (decisions left out), and
{"type": "reset"} to make the client refetch its snapshot.

Batching: group messages are not forwarded one by one. Calls are collected in a per-connection
buffer and sent at most every `FLUSH_INTERVAL` seconds as one message, so a burst of 500
calls/s costs the browser ~10 messages a second instead of falling behind.

Bound: the buffer holds at most `EXTPROXY_LIVE_BUFFER` calls (environment, default 5000). When
a connection cannot keep up and the buffer would overflow, the buffered calls are dropped and the
next flush sends `reset` instead: the client refetches the snapshot, so nothing is lost
silently. The socket is never blocked on; the channel layer's own capacity bounds the rest.

Gaps: each publishing process numbers its messages (`origin`, `seq`). A skipped number means
calls this connection never got (a publish lost while Redis was away, a message the layer
dropped at its capacity): the buffer is dropped and a `reset` sent, as at the bound.

Unauthenticated connections are closed with code 4401, users without a role with 4403; an
open socket is closed the same way when its user loses access (live_access). A connection that
cannot join the group (Redis away) is closed with 4503; the browser retries.
This module must not query the call records: the recorder's summaries are the payload.
"""
from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from extproxy.ratelog import RateLimitedLog
from extproxy.recording import LIVE_GROUP
from extproxy.roles import Perm

from .live_access import user_group

# A handshake waited on a hung Redis until the ASGI server gave up (a 500 after ~15 s); this
# closes it sooner, with CLOSE_STREAM_AWAY, which the page shows (live.js keeps the recorded calls).
JOIN_TIMEOUT = 5.0
ECHO_SECONDS = float(getattr(settings, "EXTPROXY_LIVE_ECHO_SECONDS", 15))
CLOSE_STREAM_AWAY = 4503
log = RateLimitedLog(logging.getLogger("extproxy.live"), interval=60.0)
FLUSH_INTERVAL = getattr(settings, "EXTPROXY_LIVE_FLUSH_MS", 100) / 1000
MAX_ORIGINS = 256  # publishing processes remembered per connection (replicas come and go)


def buffer_bound() -> int:
    return int(getattr(settings, "EXTPROXY_LIVE_BUFFER", 5000))


def gap(seen: OrderedDict, event: dict) -> bool:
    """True when `event` is not the next message of its publisher (and remembers it)."""
    origin, seq = event.get("origin"), event.get("seq")
    if origin is None or not isinstance(seq, int):
        return False  # a publisher that does not number its messages
    last = seen.get(origin)
    seen[origin] = max(seq, last or 0)
    seen.move_to_end(origin)
    while len(seen) > MAX_ORIGINS:
        seen.popitem(last=False)
    return last is not None and seq > last + 1


class LiveConsumer(AsyncJsonWebsocketConsumer):
    required_permission = Perm.VIEW_CALLS
    handshake_done = False
    echoes: asyncio.Task | None = None
    expiry: asyncio.Task | None = None  # closes a token's socket when the token expires

    async def __call__(self, scope, receive, send):
        """The layer's channel is made (a Redis subscription) before connect() runs: when Redis
        refuses or does not answer, the handshake ended in a 500; it is closed with
        CLOSE_STREAM_AWAY instead, which the page explains."""
        try:
            await super().__call__(scope, receive, send)
        except Exception as exc:
            if self.handshake_done:
                raise
            await self.stream_away(exc, receive, send)

    async def stream_away(self, exc: BaseException, receive, send) -> None:
        log.emit(logging.WARNING, "live-join", "live stream unavailable: the channel layer did not "
                 "answer (%s: %s); browsers show the recorded calls", type(exc).__name__, exc)
        if (await receive())["type"] == "websocket.connect":
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.close", "code": CLOSE_STREAM_AWAY})

    async def connect(self):
        self.handshake_done = True
        self.buffer: list[dict] = []
        self.overflowed = False
        self.sequences: OrderedDict[str, int] = OrderedDict()
        self.flusher: asyncio.Task | None = None
        self.joined = False
        self.revoked = False
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.refuse(4401)
            return
        if not await database_sync_to_async(user.has_perm)(self.required_permission):
            await self.refuse(4403)
            return
        # its user's own group: told when the user may have lost access (live_access)
        self.user_group = user_group(user.pk)
        try:
            await asyncio.wait_for(self.join(), JOIN_TIMEOUT)
        except Exception as exc:  # the layer (Redis) refused or did not answer: say so, not a 500
            log.emit(logging.WARNING, "live-join", "live stream unavailable: the channel layer did not "
                     "answer (%s: %s); browsers show the recorded calls", type(exc).__name__, exc)
            await self.refuse(CLOSE_STREAM_AWAY)
            return
        self.joined = True
        await self.accept()
        # The client (re)loads its snapshot now and applies the stream on top of it.
        await self.send_json({"type": "reset"})
        self.echoes = asyncio.create_task(self.keep_echoing())
        ends = self.scope.get("token_ends")
        if ends is not None:  # a token's socket lasts no longer than the token (EXTPROXY_TOKEN_MAX_AGE)
            self.expiry = asyncio.create_task(self.close_at(ends))

    async def close_at(self, ends) -> None:
        """Closed with 4401, as a deleted token's socket is, when the token expires."""
        from django.utils import timezone

        await asyncio.sleep(max(0.0, (ends - timezone.now()).total_seconds()))
        await self.revoke(4401)

    async def revoke(self, code: int) -> None:
        self.revoked = True  # nothing more is sent, whatever is still on its way
        if self.flusher is not None:
            self.flusher.cancel()
        self.buffer = []
        await self.close(code=code)

    async def join(self) -> None:
        await self.channel_layer.group_add(LIVE_GROUP, self.channel_name)
        await self.channel_layer.group_add(self.user_group, self.channel_name)

    async def refuse(self, code: int) -> None:
        # Closing before accepting reaches the client as an HTTP 403 without the code.
        await self.accept()
        await self.close(code=code)

    async def keep_echoing(self) -> None:
        """An open socket over a Redis that stopped answering got nothing and still said "live":
        every ECHO_SECONDS a message goes through the layer back to this connection; when one
        cannot be sent, or none came back for two periods, the socket is closed with
        CLOSE_STREAM_AWAY, and the browser says so and retries."""
        loop = asyncio.get_running_loop()
        self.last_echo = loop.time()
        while True:
            await asyncio.sleep(ECHO_SECONDS)
            late = loop.time() - self.last_echo > 2 * ECHO_SECONDS + JOIN_TIMEOUT
            try:
                if not late:
                    await asyncio.wait_for(self.channel_layer.send(self.channel_name, {"type": "live.echo"}), JOIN_TIMEOUT)
                    continue
            except Exception as exc:
                log.emit(logging.WARNING, "live-echo", "live stream lost: the channel layer did not answer "
                         "(%s: %s)", type(exc).__name__, exc)
            await self.close(code=CLOSE_STREAM_AWAY)
            return

    async def live_echo(self, event) -> None:
        self.last_echo = asyncio.get_running_loop().time()

    async def disconnect(self, code):
        if self.flusher is not None:
            self.flusher.cancel()
        if self.echoes is not None:
            self.echoes.cancel()
        if self.expiry is not None:
            self.expiry.cancel()
        if self.joined:
            try:  # bounded: a layer that does not answer must not hold the connection's end
                await asyncio.wait_for(self.leave(), JOIN_TIMEOUT)
            except Exception:
                pass  # the layer forgets a dead channel's groups itself (their expiry)

    async def leave(self) -> None:
        await self.channel_layer.group_discard(LIVE_GROUP, self.channel_name)
        await self.channel_layer.group_discard(self.user_group, self.channel_name)

    async def live_recheck(self, event):
        """The user may have lost access: closed when the change names this socket's session
        or token, or when the user, read afresh, is no longer active and allowed."""
        session = self.scope.get("session")
        if event.get("session") and session is not None and event["session"] == session.session_key:
            code = 4401
        elif event.get("token") and event["token"] == self.scope.get("token_key"):
            code = 4401
        else:
            code = await database_sync_to_async(self._still_allowed)()
        if code:
            await self.revoke(code)

    def _still_allowed(self) -> int:
        """0 when the socket's user is still active and allowed, else the close code."""
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.filter(pk=self.scope["user"].pk, is_active=True).first()
        if user is None:
            return 4401
        return 0 if user.has_perm(self.required_permission) else 4403

    async def receive_json(self, content, **kwargs):
        pass  # the stream is one-way; clients have nothing to say

    async def calls_batch(self, event):
        if self.revoked:
            return
        calls = event.get("calls") or []
        if gap(self.sequences, event):
            self.buffer = []
            self.overflowed = True  # the next flush sends reset: the client refetches
        if self.overflowed:
            pass  # a reset is already due: the snapshot will carry these calls
        elif len(self.buffer) + len(calls) > buffer_bound():
            self.buffer = []
            self.overflowed = True
        else:
            self.buffer.extend(calls)
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.ensure_future(self._flush_later())

    async def _flush_later(self):
        await asyncio.sleep(FLUSH_INTERVAL)
        await self.flush()

    async def flush(self):
        if self.overflowed:
            self.overflowed = False
            self.buffer = []
            await self.send_json({"type": "reset"})
            return
        calls, self.buffer = self.buffer, []
        if len(calls) == 1:
            await self.send_json({"type": "calls/add", "payload": calls[0]})
        elif calls:
            await self.send_json({"type": "calls/batch", "payload": calls})
