"""A TCP relay on loopback in front of a server, that a test can freeze: a peer that stops
answering without closing.

Frozen, it reads nothing more from either side and takes no new connection; each connection's
socket towards the client was made with a small receive buffer, so the client's kernel soon
finds the window shut and whatever the client still has to send stays unsent, unacknowledged,
as towards a host that died. Nothing is closed or reset meanwhile. Thawed, it relays again.

`freeze_after(n)`: it relays `n` more bytes from the clients, then freezes, in the middle of
whatever the client is sending (a COPY), so the client is caught sending rather than waiting for
an answer to what was already taken.

`swallow()`: a peer alive at the TCP level that never answers (a server process stuck, a pooler
in front of it wedged). Every connection reads on and discards what its client sends, window
open, every byte and keepalive acknowledged, and passes nothing back; a connection opened
meanwhile reaches no server. `swallow_after(marker)`: the same for a connection from the moment
it has passed on a message holding `marker` (COMMIT: the server commits what the client never
hears committed; a query's text: the client hangs on that query only).
`relay_again()`: new connections relay; one that swallowed anything goes on swallowing (its
protocol stream has a hole in it), as a wedged peer's old connections do.
"""
from __future__ import annotations

import select
import socket
import threading

COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"  # psycopg's COMMIT: a simple-query message ('Q', length 11, the text)
RECEIVE_BUFFER = 4096  # towards the client: the kernel doubles it; the window closes after ~8 KiB


class FreezableRelay:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)  # accepted ones inherit it
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self._thawed = threading.Event()
        self._thawed.set()
        self._lock = threading.Lock()
        self._budget: int | None = None  # bytes from clients still relayed before freezing; None: no limit
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._swallowing = False
        self._swallow_marker: bytes | None = None
        self._swallowed: set[socket.socket] = set()  # client sockets that never get an answer again
        self.swallowed_bytes = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def frozen(self) -> bool:
        return not self._thawed.is_set()

    def freeze_after(self, client_bytes: int) -> None:
        with self._lock:
            self._budget = client_bytes

    def thaw(self) -> None:
        with self._lock:
            self._budget = None
        self._thawed.set()

    def swallow(self) -> None:
        with self._lock:
            self._swallowing = True

    def swallow_after(self, marker: bytes) -> None:
        with self._lock:
            self._swallow_marker = marker

    def relay_again(self) -> None:
        with self._lock:
            self._swallowing, self._swallow_marker = False, None

    def close(self) -> None:
        self._closed.set()
        self._thawed.set()
        self.listener.close()
        for sock in list(self._sockets):
            sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            self._thawed.wait()
            if not self._wait_readable(self.listener):
                continue
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            with self._lock:
                if self._swallowing:
                    self._swallowed.add(client)
            if client in self._swallowed:  # it reaches no server: its startup is never answered
                threading.Thread(target=self._pump, args=(client, None, True), daemon=True).start()
                continue
            server = socket.create_connection(self.target)
            self._sockets.append(server)
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _wait_readable(self, sock: socket.socket) -> bool:
        try:
            return bool(select.select([sock], [], [], 0.05)[0]) and self._thawed.is_set()
        except (OSError, ValueError):  # closed meanwhile
            return False

    def _pump(self, source: socket.socket, sink: socket.socket | None, from_client: bool) -> None:
        client = source if from_client else sink
        try:
            while not self._closed.is_set():
                self._thawed.wait()
                if not self._wait_readable(source):
                    continue
                data = source.recv(self._allowed() if from_client else 65536)
                if not data:
                    break
                if self._swallows(client, data if from_client else b""):
                    with self._lock:
                        self.swallowed_bytes += len(data)
                    continue
                assert sink is not None
                if from_client:
                    # Marked before it is sent: marked after, a fast server's answer could reach
                    # the other pump before the mark, and pass (a CI run saw it).
                    self._mark(client, data)
                sink.sendall(data)
                if from_client:
                    self._spend(len(data))
        except OSError:
            pass
        for sock in (source, sink):
            if sock is None:
                continue
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _swallows(self, client, data: bytes) -> bool:
        """Whether what came from or for `client` is discarded (from now on, for ever)."""
        with self._lock:
            if self._swallowing and data:  # caught mid-stream: from the next thing it sends
                self._swallowed.add(client)
            return client in self._swallowed

    def _mark(self, client, data: bytes) -> None:
        """The marker just passed on: the answer to it and everything after is swallowed."""
        with self._lock:
            if self._swallow_marker is not None and self._swallow_marker in data:
                self._swallowed.add(client)

    def _allowed(self) -> int:
        with self._lock:
            return 65536 if self._budget is None else max(1, min(65536, self._budget))

    def _spend(self, n: int) -> None:
        with self._lock:
            if self._budget is None:
                return
            self._budget -= n
            if self._budget <= 0:
                self._thawed.clear()
