"""The floor under any Python proxy on the judged pinning: a bare byte relay beside extproxy.

Issue 8's full-object target (p50 <= 1.15x direct) asks what a second hop in Python can cost at
all when it shares one core with the load client. This runs, in alternating batches of one run
(full-object filter, N=1000 nodes, 2.9 MB each way, one caller; the same pinning as `make bench`):

- direct: the client to the reference backend;
- relay cut: a uvloop process on the proxy's core that passes each side's bytes on as they
  arrive (no HTTP parsing, no copy kept): what a proxy without any per-call work costs;
- relay splice: the same with the kernel moving the bytes (splice(2) through a pipe, one blocking
  thread per direction): nothing is copied into the process at all;
- relay store: the same as relay cut, but the request is held until its last byte
  (Content-Length) and then sent on in one write, as extproxy's listener did before request
  cut-through; replies are passed on as they arrive;
- relay parsed: each request and each reply parsed by httptools and sent on whole as a new
  message, from the protocols' callbacks, with no task per call: the floor of a proxy that reads
  HTTP in Python, as extproxy's listener must;
- extproxy: the extender listener, recording off (`--recording`: on, with its recorder process
  on the proxy's core, as `make bench` runs it).

The ratios of the relays against direct bound what cut-through of the request could buy
and what no Python proxy on that core can go below. Beside each proxy's latencies: the CPU its
process used per call (and its recorder's, on a line of its own), over the whole run less what it
uses idle, so that work done after the answer counts too (`compare`).

    .venv/bin/python bench/relay_floor.py [--mode full|names] [--n 1000] [--recording] [--also CHECKOUT]
    .venv/bin/python bench/relay_floor.py --serve PORT TARGET_PORT cut|splice|store|parsed   # the relay alone
"""
from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hop_costs import batch, json_session, poster, reference_config, start_extproxy, start_reference  # noqa: E402
from run import BACKEND_CORE, HOST, PIN, PROXY_CORE, PYTHON, ROOT, build_bodies, free_port, pct, pinned, stop  # noqa: E402

SCALE = float(os.environ.get("BENCH_SCALE", "1"))
ROUNDS = 6
IDLE_SECONDS = 3.0  # each proxy's CPU use with no calls, measured before the rounds


# --- the relay ----------------------------------------------------------------------------------


class Side(asyncio.Protocol):
    """One end of a relayed connection: what it receives goes to `peer` (with flow control)."""

    def __init__(self, store: bool) -> None:
        self.peer: Side | None = None
        self.transport: asyncio.Transport | None = None
        self.pending: list[bytes] = []  # bytes that arrived before the peer was connected
        self.store = store  # hold a request until its last byte
        self.held: list[bytes] = []
        self.need = -1  # bytes of the current request still to come (-1: head not seen yet)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.store:
            self._send(data)
            return
        self.held.append(data)
        if self.need < 0:
            joined = b"".join(self.held)
            end = joined.find(b"\r\n\r\n")
            if end < 0:
                self.held = [joined]
                return
            length = 0
            for line in joined[:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            self.need = end + 4 + length
            self.held = [joined]
        if sum(map(len, self.held)) >= self.need:
            whole = b"".join(self.held)
            self._send(whole[:self.need])
            rest = whole[self.need:]
            self.held, self.need = [], -1
            if rest:
                self.data_received(rest)

    def _send(self, data: bytes) -> None:
        if self.peer is None or self.peer.transport is None:
            self.pending.append(data)
        else:
            self.peer.transport.write(data)

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


async def serve_relay(port: int, target: int, mode: str) -> None:
    loop = asyncio.get_running_loop()

    def accepted() -> Side:
        client = Side(store=mode == "store")

        async def connect() -> None:
            _, backend = await loop.create_connection(lambda: Side(store=False), HOST, target)
            backend.peer, client.peer = client, backend
            for data in client.pending:
                backend.transport.write(data)
            client.pending.clear()

        loop.create_task(connect())
        return client

    server = await loop.create_server(accepted, HOST, port)
    await server.serve_forever()


class ParsedRequests(asyncio.Protocol):
    """The scheduler's side of the parsed relay: each request parsed (httptools), then sent
    on whole as a new request on this connection's own backend connection."""

    def __init__(self, backend: "ParsedReplies") -> None:
        import httptools

        self.backend = backend
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url, self.parts = b"", []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.parts.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self.parts)
        self.backend.send(b"POST %s HTTP/1.1\r\nHost: backend\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n" % (self.url, len(body)) + body, self)
        self.url, self.parts = b"", []

    def answer(self, status: int, content_type: bytes, body: bytes) -> None:
        assert self.transport is not None
        self.transport.write(b"HTTP/1.1 %d OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
                             % (status, content_type, len(body)) + body)

    def connection_lost(self, exc: Exception | None) -> None:
        self.backend.close()


class ParsedReplies(asyncio.Protocol):
    """The backend's side of the parsed relay: each reply parsed, then answered whole."""

    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.client: ParsedRequests | None = None
        self.content_type, self.parts, self.pending = b"application/json", [], b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.pending:  # a request that came before this connection was made
            self.transport.write(self.pending)
            self.pending = b""

    def send(self, request: bytes, client: ParsedRequests) -> None:
        self.client = client
        if self.transport is None:
            self.pending += request
        else:
            self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-type":
            self.content_type = value

    def on_body(self, body: bytes) -> None:
        self.parts.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self.parts)
        self.parts = []
        if self.client is not None:
            self.client.answer(self.parser.get_status_code(), self.content_type, body)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def serve_parsed(port: int, target: int) -> None:
    """The parsed relay: what a proxy costs that parses every message once each way and runs
    no task per call (each client connection has its backend connection, opened with it)."""
    loop = asyncio.get_running_loop()

    def connection() -> ParsedRequests:
        backend = ParsedReplies()
        client = ParsedRequests(backend)
        loop.create_task(loop.create_connection(lambda: backend, HOST, target))
        return client

    server = await loop.create_server(connection, HOST, port)
    await server.serve_forever()


def serve_splice(port: int, target: int) -> None:
    """Each accepted connection gets one to `target`, and a thread per direction that splices."""
    listener = socket.create_server((HOST, port))
    while True:
        client, _ = listener.accept()
        backend = socket.create_connection((HOST, target))
        for sock in (client, backend):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for src, dst in ((client, backend), (backend, client)):
            threading.Thread(target=splice_pump, args=(src, dst), daemon=True).start()


def splice_pump(src: socket.socket, dst: socket.socket) -> None:
    """socket -> pipe -> socket until `src` ends; the bytes stay in the kernel."""
    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 1 << 20)  # 1 MiB moves per call
    except OSError:
        pass
    try:
        while True:
            moved = os.splice(src.fileno(), write_end, 1 << 20, flags=os.SPLICE_F_MOVE)
            if not moved:
                break
            while moved:
                moved -= os.splice(read_end, dst.fileno(), moved, flags=os.SPLICE_F_MOVE)
    except OSError:
        pass
    finally:
        os.close(read_end)
        os.close(write_end)
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


# --- the measurement ----------------------------------------------------------------------------


def cpu_seconds(pids: list[int]) -> float:
    """CPU time the processes' live threads have run so far: the scheduler's own count in
    nanoseconds (/proc/PID/task/TID/schedstat), not clock ticks, which a process that runs in
    bursts of tens of microseconds is charged by chance."""
    total = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as stat:
                    total += int(stat.read().split()[0])
            except FileNotFoundError:  # the thread ended meanwhile
                continue
    return total / 1e9


async def compare(urls: dict[str, str], body: bytes, per_round: int,
                  pids: dict[str, list[int]] | None = None) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Each side's latencies, and the CPU seconds the processes `pids` names for it (a proxy's)
    used from the end of the warm-up until a second after the last batch, less what they use
    idle (timers, polling; measured for IDLE_SECONDS before): over the whole run, not only the
    side's own batches, so that work it does after answering (a recorder's) is counted too."""
    pids = pids or {}
    session = json_session(limit=8)
    expected: list[bytes] = []

    def same_answer(url: str, answer: bytes) -> None:
        if not expected:
            expected.append(answer)
        assert answer == expected[0], f"{url} answered differently"

    calls = {name: poster(session, url, body, same_answer) for name, url in urls.items()}
    for call in calls.values():
        await batch(call, max(5, per_round // 4))  # warm-up
    results: dict[str, list[float]] = {name: [] for name in calls}
    await asyncio.sleep(1)  # the warm-up's records written
    idle = {name: cpu_seconds(p) for name, p in pids.items()}
    await asyncio.sleep(IDLE_SECONDS)
    before = {name: cpu_seconds(p) for name, p in pids.items()}
    idle_rate = {name: (before[name] - idle[name]) / IDLE_SECONDS for name in pids}
    started = time.monotonic()
    for _ in range(ROUNDS):
        for name, call in calls.items():
            results[name] += await batch(call, per_round)
    await asyncio.sleep(1)
    elapsed = time.monotonic() - started
    cpu = {name: cpu_seconds(p) - before[name] - idle_rate[name] * elapsed for name, p in pids.items()}
    await session.close()
    return results, cpu


def extproxy_pids(side: str, started: list[tuple[subprocess.Popen, str]]) -> dict[str, list[int]]:
    """The side's serving process, and its recorder (when it has one) as "<side> recorder"."""
    return {f"{side} recorder" if what.endswith("recorder") else side: [proc.pid] for proc, what in started}


def report(results: dict[str, list[float]], cpu: dict[str, float]) -> None:
    """p50 and p99 of each side, their ratios to the side named "direct", and the CPU its proxy
    process used per call; then each recorder's CPU per call of its side."""
    direct = results["direct"]
    for name, lat in results.items():
        used = f"  proxy CPU {cpu[name] / len(lat) * 1e3:6.3f} ms/call" if name in cpu else ""
        print(f"  {name:14s} p50 {pct(lat, 0.5) * 1e3:8.3f} ms  p99 {pct(lat, 0.99) * 1e3:8.3f} ms  "
              f"ratio p50 {pct(lat, 0.5) / pct(direct, 0.5):5.2f}x  p99 {pct(lat, 0.99) / pct(direct, 0.99):5.2f}x  "
              f"({len(lat)} calls){used}")
    for name, seconds in cpu.items():
        side = name.removesuffix(" recorder")
        if name != side and side in results:
            print(f"  {name:25s} CPU {seconds / len(results[side]) * 1e3:6.3f} ms/call")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", nargs=3, metavar=("PORT", "TARGET_PORT", "MODE"))
    parser.add_argument("--mode", choices=("full", "names"), default="full")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--recording", action="store_true")
    parser.add_argument("--also", metavar="CHECKOUT", help="a second extproxy from another checkout (e.g. a worktree "
                        "of an earlier commit, with its own .venv), measured in the same run")
    args = parser.parse_args()
    import uvloop

    if args.serve:
        port, target, mode = args.serve
        if mode == "splice":
            serve_splice(int(port), int(target))
            return 0
        if mode == "parsed":
            uvloop.run(serve_parsed(int(port), int(target)))
            return 0
        uvloop.run(serve_relay(int(port), int(target), mode))
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="extproxy-floor-"))
    procs: list[tuple[subprocess.Popen, str]] = []
    try:
        body = build_bodies([args.n])[(args.mode, args.n)]
        if PIN:
            os.sched_setaffinity(0, {PROXY_CORE})
        ref_port, ext_port, cut_port, splice_port, store_port, parsed_port = (free_port() for _ in range(6))
        procs.append((start_reference(ref_port), "reference backend"))
        pids: dict[str, list[int]] = {}
        for port, mode in ((cut_port, "cut"), (splice_port, "splice"), (store_port, "store"), (parsed_port, "parsed")):
            relay = subprocess.Popen(pinned([PYTHON, __file__, "--serve", str(port), str(ref_port), mode], PROXY_CORE), cwd=ROOT)
            procs.append((relay, f"relay {mode}"))
            pids[f"relay {mode}"] = [relay.pid]
        config = reference_config(tmp, ref_port, node_cache_capable=args.mode == "names", recording=args.recording)
        started, _ = start_extproxy(ROOT, config, tmp / "this", ext_port, recording=args.recording)
        procs += started
        pids.update(extproxy_pids("extproxy", started))
        if args.also:
            also_ext = free_port()
            started, _ = start_extproxy(Path(args.also).resolve(), config, tmp / "also", also_ext,
                                        recording=args.recording, name="extproxy (also)")
            procs += started
            pids.update(extproxy_pids("extproxy also", started))
        path = "/ext/filter"
        urls = {
            "direct": f"http://{HOST}:{ref_port}{path}",
            "relay cut": f"http://{HOST}:{cut_port}{path}",
            "relay splice": f"http://{HOST}:{splice_port}{path}",
            "relay store": f"http://{HOST}:{store_port}{path}",
            "relay parsed": f"http://{HOST}:{parsed_port}{path}",
            "extproxy": f"http://{HOST}:{ext_port}/extender/ref/filter",
        }
        if args.also:
            urls["extproxy also"] = f"http://{HOST}:{also_ext}/extender/ref/filter"
        per_round = max(10, int((40 if args.mode == "full" else 300) * SCALE))
        print(f"relay floor: {args.mode} N={args.n} c=1, {len(body) / 1e6:.2f} MB, {ROUNDS} rounds of {per_round}; "
              f"recording {'on' if args.recording else 'off'}; "
              f"{'pinned: client, relays and extproxy core %d, backend core %d' % (PROXY_CORE, BACKEND_CORE) if PIN else 'not pinned'}; "
              f"load average {os.getloadavg()[0]:.2f}")
        report(*uvloop.run(compare(urls, body, per_round, pids)))
        print(f"load average at the end {os.getloadavg()[0]:.2f}")
        return 0
    finally:
        for proc, what in reversed(procs):
            stop(proc, what)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
