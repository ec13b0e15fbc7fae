"""What each layer of the hot path costs: the measurements behind the choices in listener.py and wire.py.

Two comparisons, each measured in alternating batches in one run (names mode, N=1000 nodes,
one caller), with the same pinning as `make bench` (this client and extproxy on one core, the
reference backend on the other):

1. client side, in this process against the reference backend: aiohttp's ClientSession (the
   client extproxy used before) against extproxy's own wire.Client;
2. server side, through a running extproxy (recording off, so that only serving is measured):
   the main port (uvicorn + httptools + the ASGI app) against the extender listener
   (listener.py: httptools + asyncio.Protocol), both with the same engine and client.

For each: client-seen latency p50/p99 and the CPU time per call (of this process for 1, of the
extproxy process from /proc/<pid>/stat for 2).

    .venv/bin/python bench/hop_costs.py          # BENCH_SCALE=0.3 for a quicker look
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Awaitable, Callable

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from run import (BACKEND_CORE, HOST, PIN, PROXY_CORE, PYTHON, ROOT, build_bodies, free_port, pct,  # noqa: E402
                 pinned, proxy_env, stop, wait_http)

SCALE = float(os.environ.get("BENCH_SCALE", "1"))
ROUNDS = 6
PER_ROUND = max(50, int(500 * SCALE))
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    user, system = cpu_split(pid)
    return user + system


def cpu_split(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS  # utime, stime


async def batch(call, count: int) -> list[float]:
    out = []
    for _ in range(count):
        t0 = time.perf_counter()
        await call()
        out.append(time.perf_counter() - t0)
    return out


def json_session(limit: int = 64) -> aiohttp.ClientSession:
    """The load client's session: kept-alive connections, a JSON body, no User-Agent."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit, keepalive_timeout=60),
                                 headers={"Content-Type": "application/json"}, skip_auto_headers=("User-Agent",))


def poster(session: aiohttp.ClientSession, url: str, body: bytes,
           check: Callable[[str, bytes], None] | None = None) -> Callable[[], Awaitable[None]]:
    """A call for `batch`: one POST of `body` to `url`, which must answer 200 (and pass `check`)."""
    async def call() -> None:
        async with session.post(url, data=body) as resp:
            answer = await resp.read()
            assert resp.status == 200, (url, resp.status, answer[:300])
            if check is not None:
                check(url, answer)
    return call


def line(name: str, lat: list[float], cpu_per_call: float) -> str:
    return (f"  {name:34s} p50 {pct(lat, 0.5) * 1e3:7.3f} ms  p99 {pct(lat, 0.99) * 1e3:7.3f} ms  "
            f"CPU {cpu_per_call * 1e6:7.1f} us/call  ({len(lat)} calls)")


async def clients(ref_url: str, body: bytes) -> None:
    from extproxy.backends.wire import Client

    session = json_session()
    wire = Client(None)

    async def via_aiohttp() -> None:
        async with session.post(ref_url, data=body) as resp:
            await resp.read()

    async def via_wire() -> None:
        await wire.post(ref_url, body, 64 << 20, False)

    results: dict[str, tuple[list[float], float]] = {"aiohttp": ([], 0.0), "wire": ([], 0.0)}
    for call in (via_aiohttp, via_wire):
        await batch(call, 50)  # warm-up
    for _ in range(ROUNDS):
        for name, call in (("aiohttp", via_aiohttp), ("wire", via_wire)):
            c0 = time.process_time()
            lat = await batch(call, PER_ROUND)
            lats, cpu = results[name]
            results[name] = (lats + lat, cpu + time.process_time() - c0)
    await session.close()
    wire.close()
    print("1. client side (this process -> reference backend), names N=1000, c=1")
    for name, (lat, cpu) in results.items():
        print(line(f"aiohttp.ClientSession" if name == "aiohttp" else "extproxy wire.Client", lat, cpu / len(lat)))


async def alternate(urls: dict[str, tuple[str, int]], body: bytes) -> dict[str, tuple[list[float], float, float]]:
    """The same calls to each named (url, server pid), ROUNDS rounds of PER_ROUND in turn (drift
    on the machine hits every side alike), after a warm-up: per side the latencies and the
    server process's user and kernel CPU seconds."""
    session = json_session()
    sides = {name: (poster(session, url, body), pid) for name, (url, pid) in urls.items()}
    results: dict[str, tuple[list[float], float, float]] = {name: ([], 0.0, 0.0) for name in sides}
    for call, _ in sides.values():
        await batch(call, 50)
    for _ in range(ROUNDS):
        for name, (call, pid) in sides.items():
            u0, s0 = cpu_split(pid)
            lat = await batch(call, PER_ROUND)
            u1, s1 = cpu_split(pid)
            lats, user, system = results[name]
            results[name] = (lats + lat, user + u1 - u0, system + s1 - s0)
    await session.close()
    return results


async def servers(main_url: str, listener_url: str, body: bytes, main_pid: int, listener_pid: int) -> None:
    """The same calls through each port, round by round. Two extproxy processes: with the extender
    listener on, the main port refuses /extender/ (asgi.py), so the main port's side is an extproxy
    without one."""
    results = await alternate({"main port (uvicorn ASGI)": (main_url, main_pid),
                               "extender listener": (listener_url, listener_pid)}, body)
    print("2. server side (client -> extproxy -> reference backend; recording off), names N=1000, c=1; CPU of extproxy")
    for name, (lat, user, system) in results.items():
        print(line(name, lat, (user + system) / len(lat))
              + f"  [user {user / len(lat) * 1e6:.0f} us + kernel {system / len(lat) * 1e6:.0f} us]")


def start_reference(port: int) -> subprocess.Popen:
    """bench/refbackend.py on the backend's core, answering."""
    ref = subprocess.Popen(pinned([PYTHON, str(ROOT / "bench" / "refbackend.py"), "--port", str(port)], BACKEND_CORE), cwd=ROOT)
    wait_http(f"http://{HOST}:{port}/", ref, "reference backend")
    return ref


Procs = list[tuple[subprocess.Popen, str]]


def start_extproxy(checkout: Path, config: Path, data: Path, extender_port: int, *, recording: bool = False,
                   wrap: Callable[[list[str]], list[str]] = lambda cmd: cmd, ready: bool = True,
                   name: str = "extproxy", **env_vars: str) -> tuple[Procs, int]:
    """extproxy of `checkout` (with its own .venv) as `make run` starts it, pinned to the proxy core:
    migrated, serving (main port free on loopback, the extender listener on `extender_port`), and
    with `recording` its recorder process beside it. `wrap` wraps each command (a network
    namespace); `ready`: wait for /healthz. Returns (processes, stop them in reverse; main port)."""
    python, uvicorn = str(checkout / ".venv" / "bin" / "python"), str(checkout / ".venv" / "bin" / "uvicorn")
    data.mkdir(parents=True, exist_ok=True)
    env = proxy_env(config, data)
    env.update(EXTPROXY_EXTENDER_PORT=str(extender_port), **env_vars)
    subprocess.run([python, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=checkout, env=env, check=True)
    main_port = free_port()
    procs: Procs = [(subprocess.Popen(wrap(pinned([uvicorn, "extproxy.asgi:application", "--host", HOST, "--port",
                                                   str(main_port), "--loop", "uvloop", "--http", "httptools",
                                                   "--no-access-log", "--lifespan", "on"], PROXY_CORE)),
                                      cwd=checkout, env=env), name)]
    if recording:
        procs.append((subprocess.Popen(wrap(pinned([python, "manage.py", "recorder"], PROXY_CORE)), cwd=checkout, env=env),
                      f"{name} recorder"))
    if ready:
        wait_http(f"http://{HOST}:{main_port}/healthz", procs[0][0], name)
    return procs, main_port


def reference_config(tmp: Path, ref_port: int, node_cache_capable: bool, recording: bool) -> Path:
    """An extproxy configuration file with the one backend `ref` in front of the reference backend."""
    config = tmp / "extproxy.json"
    config.write_text(json.dumps({"backends": [{"name": "ref", "urlPrefix": f"http://{HOST}:{ref_port}/ext",
                                                "filterVerb": "filter", "weight": 1, "httpTimeout": "5s",
                                                "nodeCacheCapable": node_cache_capable}],
                                  "recording": {"enabled": recording}}))
    return config


def main() -> int:
    import uvloop

    tmp = Path(tempfile.mkdtemp(prefix="extproxy-hop-"))
    ref = None
    procs: Procs = []
    try:
        body = build_bodies([1000])[("names", 1000)]
        if PIN:
            os.sched_setaffinity(0, {PROXY_CORE})
        ref_port, ext_port = free_port(), free_port()
        ref = start_reference(ref_port)
        config = reference_config(tmp, ref_port, node_cache_capable=True, recording=False)
        procs, _ = start_extproxy(ROOT, config, tmp / "listener", ext_port)
        main_only, main_port = start_extproxy(ROOT, config, tmp / "main", 0, name="extproxy without a listener")
        procs += main_only
        print(f"hop costs; {'pinned: client+extproxy core %d, backend core %d' % (PROXY_CORE, BACKEND_CORE) if PIN else 'not pinned'}; "
              f"load average {os.getloadavg()[0]:.2f}")
        uvloop.run(clients(f"http://{HOST}:{ref_port}/ext/filter", body))
        path = "/extender/ref/filter"
        uvloop.run(servers(f"http://{HOST}:{main_port}{path}", f"http://{HOST}:{ext_port}{path}", body,
                           main_only[0][0].pid, procs[0][0].pid))
        print(f"load average at the end {os.getloadavg()[0]:.2f}")
        return 0
    finally:
        for proc, what in reversed(procs):
            stop(proc, what)
        stop(ref, "reference backend")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
