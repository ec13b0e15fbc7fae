"""The hot path's HTTP client (extproxy/backends/wire.py) against real servers on loopback.

What a general client did for us and this one must do too: keep-alive reuse, chunked and
read-until-close bodies, gzip, Go's redirect rules, a retry when the server closed an idle
connection, the pool limit, and the reply bound (first part plus a flow-controlled stream).
"""
from __future__ import annotations

import asyncio
import gzip
import socket
import threading

import pytest

from extproxy.backends.wire import Client, TooManyRedirects, WireError
from tests.conftest import BackendHandler, reply

LIMIT = 1 << 20


def post_once(url: str, body: bytes = b"{}", limit: int = LIMIT, stream: bool = False):
    async def run():
        client = Client(None)
        try:
            return await client.post(url, body, limit, stream)
        finally:
            client.close()

    return asyncio.run(run())


def raw_server(handle) -> tuple[str, threading.Thread, socket.socket]:
    """A one-connection-at-a-time server whose bytes the test writes itself."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                handle(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", thread, listener


def read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


def test_it_reuses_one_connection_for_calls_one_after_another(backend_server):
    backend = backend_server({"*": reply(200, b'{"ok":true}')})
    ports: list[int] = []
    original = BackendHandler.do_POST

    async def run() -> list:
        client = Client(None)
        try:
            return [await client.post(f"{backend.url}/x/filter", b"{}", LIMIT, False) for _ in range(5)]
        finally:
            client.close()

    def counting(handler):
        ports.append(handler.client_address[1])
        original(handler)

    BackendHandler.do_POST = counting
    try:
        replies = asyncio.run(run())
    finally:
        BackendHandler.do_POST = original
    assert [(r.status, r.first) for r in replies] == [(200, b'{"ok":true}')] * 5
    assert len(set(ports)) == 1


def test_it_reads_chunked_and_until_close_bodies_and_gzip():
    def handle(conn: socket.socket) -> None:
        request = read_request(conn)
        if b"/chunked" in request:
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        elif b"/gzip" in request:
            data = gzip.compress(b'{"zipped":1}')
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
        else:
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")

    url, _, listener = raw_server(handle)

    async def run():
        client = Client(None)
        try:
            return [await client.post(f"{url}/{p}", b"{}", LIMIT, False) for p in ("chunked", "gzip", "close")]
        finally:
            client.close()

    try:
        chunked, zipped, close = asyncio.run(run())
    finally:
        listener.close()
    assert chunked.first == b"abcde"
    assert zipped.first == b'{"zipped":1}'
    assert close.first == b"until the end" and close.content_type == "text/plain"


@pytest.mark.parametrize("status, method, body_kept", [(307, b"POST", True), (308, b"POST", True),
                                                       (302, b"GET", False), (303, b"GET", False)])
def test_it_follows_redirects_as_go_does(status, method, body_kept):
    seen: list[bytes] = []

    def handle(conn: socket.socket) -> None:
        while True:
            request = read_request(conn)
            if not request:
                return
            seen.append(request)
            if b" /old " in request.split(b"\r\n")[0] + b" ":
                conn.sendall(b"HTTP/1.1 %d Moved\r\nLocation: /new\r\nContent-Length: 0\r\n\r\n" % status)
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    url, _, listener = raw_server(handle)
    try:
        result = post_once(f"{url}/old", b'{"a":1}')
    finally:
        listener.close()
    assert result.first == b"ok"
    assert seen[1].startswith(method + b" /new HTTP/1.1")
    assert seen[1].endswith(b'{"a":1}') == body_kept


def test_it_stops_after_ten_redirects():
    def handle(conn: socket.socket) -> None:
        while read_request(conn):
            conn.sendall(b"HTTP/1.1 307 Again\r\nLocation: /again\r\nContent-Length: 0\r\n\r\n")

    url, _, listener = raw_server(handle)
    try:
        with pytest.raises(TooManyRedirects):
            post_once(f"{url}/start")
    finally:
        listener.close()


def test_it_retries_once_when_the_server_closed_an_idle_connection():
    served = []

    def handle(conn: socket.socket) -> None:
        # Answers one request per connection with keep-alive, then closes it while "idle".
        if read_request(conn):
            served.append(1)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    url, _, listener = raw_server(handle)

    async def run():
        client = Client(None)
        first = await client.post(f"{url}/a", b"{}", LIMIT, False)
        await asyncio.sleep(0.2)  # the server has closed the kept-alive connection meanwhile
        second = await client.post(f"{url}/a", b"{}", LIMIT, False)
        client.close()
        return first, second

    try:
        first, second = asyncio.run(run())
    finally:
        listener.close()
    assert first.first == second.first == b"ok" and len(served) == 2


def test_it_fails_clearly_when_the_server_hangs_up_without_an_answer():
    def handle(conn: socket.socket) -> None:
        read_request(conn)

    url, _, listener = raw_server(handle)
    try:
        with pytest.raises(WireError, match="closed the connection without an answer"):
            post_once(f"{url}/a")
    finally:
        listener.close()


def test_it_refuses_a_connection_with_a_clear_reason():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(WireError, match="connection failed"):
        post_once(f"http://127.0.0.1:{port}/a")


def test_it_streams_the_rest_of_a_reply_over_the_limit(backend_server):
    body = bytes(range(256)) * 40_000  # about 10 MB
    backend = backend_server({"*": reply(200, body)})

    async def run():
        client = Client(None)
        result = await client.post(f"{backend.url}/big", b"{}", 65536, True)
        rest = [chunk async for chunk in result.rest]
        again = await client.post(f"{backend.url}/big", b"{}", 65536, False)
        client.close()
        return result, rest, again

    result, rest, again = asyncio.run(run())
    assert result.first == body[:65536] and result.length == len(body)
    assert result.first + b"".join(rest) == body
    assert again.rest is None and again.first == body[:65536] and again.over_limit > 65536


def test_it_holds_at_most_the_pool_limit_of_connections(backend_server):
    import time

    def slowly(handler, _body):
        time.sleep(0.2)
        handler.answer(200, b"{}")

    backend = backend_server({"*": slowly})
    open_now, most = 0, 0
    lock = threading.Lock()
    original = BackendHandler.do_POST

    def counting(handler):
        nonlocal open_now, most
        with lock:
            open_now += 1
            most = max(most, open_now)
        try:
            original(handler)
        finally:
            with lock:
                open_now -= 1

    async def run():
        client = Client(None, limit=3)
        try:
            return await asyncio.gather(*(client.post(f"{backend.url}/x", b"{}", LIMIT, False) for _ in range(9)))
        finally:
            client.close()

    BackendHandler.do_POST = counting
    try:
        replies = asyncio.run(run())
    finally:
        BackendHandler.do_POST = original
    assert len(replies) == 9 and most == 3


def test_a_freed_slot_goes_to_a_waiter_and_one_cancelled_after_it_got_it_passes_it_on(backend_server):
    from extproxy.backends.pool import Pool

    backend = backend_server({"*": reply(200, b"{}")})
    host, port = backend.url.removeprefix("http://").split(":")

    async def run():
        pool = Pool(host, int(port), None, None, limit=1, keepalive=60)
        first = await pool.acquire()
        second = asyncio.ensure_future(pool.acquire())
        third = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0.05)  # both wait for the one slot
        waiting = (second.done(), third.done(), pool.in_use)
        pool.release(first)  # the slot is handed to `second`...
        second.cancel()  # ...which is cancelled before it runs: it must pass the slot on
        got = await asyncio.wait_for(third, 5)
        held = pool.in_use
        fourth = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0.05)
        fourth.cancel()  # cancelled while waiting, and not run yet when...
        pool.release(got)  # ...the slot is freed: it is skipped, the slot is free again
        await asyncio.gather(fourth, return_exceptions=True)
        pool.close()
        return waiting, second.cancelled(), held, fourth.cancelled(), pool.in_use

    waiting, cancelled, held, skipped, after = asyncio.run(run())
    assert waiting == (False, False, 1)
    assert cancelled and held == 1
    assert skipped and after == 0


def test_begin_writes_on_an_idle_connection_only_and_reads_a_plain_reply_whole(backend_server):
    backend = backend_server({"*": reply(200, b'{"ok":true}')})
    ports: list[int] = []
    original = BackendHandler.do_POST

    def counting(handler):
        ports.append(handler.client_address[1])
        original(handler)

    async def run():
        client = Client(None)
        url = f"{backend.url}/x/filter"
        try:
            before = client.begin(url, b"{}")  # nothing idle yet: nothing written
            await client.post(url, b"{}", LIMIT, False)
            sent = client.begin(url, b'{"n":1}')
            assert sent is not None and client.in_use == 1
            while not sent.conn.complete:
                await asyncio.sleep(0.005)
            plain, big = sent.plain(LIMIT, 1 << 18), sent.plain(5, 1 << 18)
            got = sent.reply()
            return before, plain, big, (got.status, got.first, got.content_type, got.length), client.in_use
        finally:
            client.close()

    BackendHandler.do_POST = counting
    try:
        before, plain, over_limit, got, in_use = asyncio.run(run())
    finally:
        BackendHandler.do_POST = original
    assert before is None and plain and not over_limit
    assert got == (200, b'{"ok":true}', "application/json", 11) and in_use == 0
    assert len(ports) == 2 and len(set(ports)) == 1 and backend.received[-1] == ("/x/filter", b'{"n":1}')


def test_take_idle_never_goes_past_the_pool_limit(backend_server):
    from extproxy.backends.pool import Pool
    from extproxy.backends.wire import Target

    backend = backend_server({"*": reply(200, b"{}")})
    target = Target.parse(f"{backend.url}/x")

    async def run():
        pool = Pool(target.host, target.port, None, None, limit=1, keepalive=60)
        conn = await pool.acquire()
        conn.send(target.head(b"POST", 2), b"{}")
        await conn.read_head()
        await conn.read_at_most(LIMIT)
        pool.release(conn)  # idle now, its slot free
        held = await pool.acquire(fresh=True)  # the one slot, on a second connection
        over_limit = pool.take_idle()
        waiter = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0.05)
        pool.release(held)  # the slot goes to the waiter, which takes the idle connection
        taken = await asyncio.wait_for(waiter, 5)
        pool.release(taken)
        pool.close()
        return over_limit, taken is conn, pool.in_use

    over_limit, took_the_idle_one, in_use = asyncio.run(run())
    assert over_limit is None and took_the_idle_one and in_use == 0
