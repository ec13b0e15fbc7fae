"""Live events: summaries of committed calls, published to the channel layer's group.

Owns the path from the recorder process (which commits) to the dashboard's consumers. With a
cross-process channel layer (Redis) the recorder sends to the group itself. With the in-memory
layer (the embedded default) only the serving process can reach its websockets, so the
recorder sends each batch over a local socket to the serving process, whose listener passes it
to its own layer. Live events are best effort: a failure is logged, never costs a record, and
never blocks the recorder for long (send timeout). Must not query or write call records.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
import struct
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import msgspec

from ..ratelog import RateLimitedLog

log = logging.getLogger(__name__)
_away = RateLimitedLog(log, interval=10.0)  # a layer away fails every batch (every few seconds)

LIVE_GROUP = "calls"
SEND_TIMEOUT = 0.5
LENGTH = struct.Struct("<I")
MAX_MESSAGE = 64 << 20

Publisher = Callable[[list[dict[str, Any]]], None]


def socket_address(root: Path, writer: str) -> str:
    """An abstract Unix socket name (Linux): no file to clean up, no path-length limit, and
    shared by containers of one pod (one network namespace)."""
    digest = hashlib.sha256(f"{Path(root).resolve()}\0{writer}".encode()).hexdigest()[:24]
    return f"\0extproxy-live-{digest}"


class Numbering:
    """Numbers a publisher's messages (`origin`, `seq`): a consumer that sees a number skipped
    (a batch lost on the way) tells its client to refetch (dashboard/consumers.py)."""

    def __init__(self) -> None:
        self.origin = uuid.uuid4().hex[:12]
        self.seq = 0

    def message(self, summaries: list[dict[str, Any]]) -> dict[str, Any]:
        self.seq += 1
        return {"type": "calls.batch", "calls": summaries, "origin": self.origin, "seq": self.seq}


# --- serving side ----------------------------------------------------------------------


async def start_listener(root: Path, writer: str) -> asyncio.AbstractServer:
    """Accept the recorder's batches and hand them to this process's channel layer."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()

    async def handle(reader: asyncio.StreamReader, writer_: asyncio.StreamWriter) -> None:
        try:
            while True:
                (length,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
                if length > MAX_MESSAGE:
                    return
                message = msgspec.msgpack.decode(await reader.readexactly(length))
                if layer is not None and isinstance(message, dict):
                    await layer.group_send(LIVE_GROUP, message)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            # The serving process is stopping. Ended here rather than passed on: Python 3.11's
            # start_unix_server asks a cancelled handler for its exception, which raises, and
            # asyncio logged an error with a traceback for each recorder connected at every stop.
            pass
        except Exception:  # a bad message costs the connection, not the process
            log.exception("live listener: message dropped")
        finally:
            writer_.close()

    return await asyncio.start_unix_server(handle, path=socket_address(root, writer))


# --- recorder side ---------------------------------------------------------------------


class SocketPublisher:
    """Sends summaries to every serving process that has a writer directory in the spool."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._sockets: dict[str, socket.socket] = {}
        self._retry_at: dict[str, float] = {}
        self._numbering = Numbering()  # one numbering: every serving process gets every batch

    def __call__(self, summaries: list[dict[str, Any]]) -> None:
        data = msgspec.msgpack.encode(self._numbering.message(summaries))
        message = LENGTH.pack(len(data)) + data
        for directory in self.root.iterdir():
            if directory.is_dir():
                self._send(directory.name, message)

    def _send(self, writer: str, message: bytes) -> None:
        sock = self._sockets.get(writer)
        if sock is None:
            if time.monotonic() < self._retry_at.get(writer, 0.0):
                return
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(SEND_TIMEOUT)
            try:
                sock.connect(socket_address(self.root, writer))
            except OSError:
                sock.close()
                self._retry_at[writer] = time.monotonic() + 1.0  # nobody listening (writer gone)
                return
            self._sockets[writer] = sock
        try:
            sock.sendall(message)
        except OSError as exc:
            log.warning("live events for %s not sent: %s", writer, exc)
            sock.close()
            del self._sockets[writer]

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()


class LayerPublisher:
    """Sends summaries straight to a cross-process channel layer (Redis), on one event loop of
    its own (the layer's connections belong to a loop: one loop, one set of connections)."""

    def __init__(self) -> None:
        import threading

        from channels.layers import get_channel_layer

        self._layer = get_channel_layer()
        self._numbering = Numbering()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="live-publisher", daemon=True)
        self._thread.start()

    def __call__(self, summaries: list[dict[str, Any]]) -> None:
        if self._layer is None:
            return
        message = self._numbering.message(summaries)  # numbered even if lost: the gap shows
        future = asyncio.run_coroutine_threadsafe(self._layer.group_send(LIVE_GROUP, message), self._loop)
        try:
            future.result(SEND_TIMEOUT * 4)
        except Exception as exc:  # the layer is away: this batch's live events are lost, counted by the gap
            future.cancel()
            _away.emit(logging.WARNING, "layer", "live events not published (the channel layer took none within "
                       "%g s; each batch lost meanwhile is refetched by the dashboards): %s",
                       SEND_TIMEOUT * 4, str(exc) or type(exc).__name__)  # a timeout's text is empty

    def close(self) -> None:
        """Stop the loop, end what is still pending on it (a send to a layer that never answered)
        and close it, with its own sockets."""
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(SEND_TIMEOUT * 4)
        if self._thread.is_alive():  # stopped at its next turn; nothing more to do here
            return
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        if pending:
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()


def recorder_publisher(root: Path) -> SocketPublisher | LayerPublisher:
    """The right publisher for this deployment's channel layer."""
    from django.conf import settings

    backend = settings.CHANNEL_LAYERS.get("default", {}).get("BACKEND", "")
    if backend.endswith("InMemoryChannelLayer") or not backend:
        return SocketPublisher(root)
    return LayerPublisher()


def channel_layer_publisher(loop: asyncio.AbstractEventLoop | None) -> Publisher:
    """Publish to this process's layer (in-process tools and tests); on `loop` when given."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    numbering = Numbering()

    def publish(summaries: list[dict[str, Any]]) -> None:
        if layer is None:
            return
        coro = layer.group_send(LIVE_GROUP, numbering.message(summaries))
        if loop is not None and loop.is_running():
            asyncio.run_coroutine_threadsafe(coro, loop)
        else:
            asyncio.run(coro)

    return publish
