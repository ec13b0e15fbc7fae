"""Do large combined calls stall other calls? Timeouts answered while 10.9 MB combined calls run.

Issue 8 measured one 10.9 MB combined call blocking every other call for 6.5 s, and per-backend
timeouts answered at 2.4-9.6 s instead of 1.8 s. This starts two extproxy processes side by side
(pinned like `make bench`): one as shipped (the combined call on the heavy lane, offload.py) and
one with EXTPROXY_OFFLOAD_BYTES=1e12 (everything on the serving loop, as before). Against each,
in alternating turns: a stream of 10.9 MB full-object combined filters (3600 Nodes, two
full-mode backends echoing them) and, meanwhile, small per-backend prioritize calls to a backend
that never answers (httpTimeout 2s: extproxy's budget 1.8 s), and quick per-backend prioritize
calls to the reference backend. Reported: when the small calls got their timeout answer (p50,
p90, max; the ideal is 1.8 s), the quick calls' latency (a stalled loop shows in p99 and max),
and the combined calls' own latency.

    .venv/bin/python bench/stall.py        # BENCH_SCALE=0.5 for fewer rounds
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import (BACKEND_CORE, HOST, PIN, PROXY_CORE, PYTHON, ROOT, UVICORN, build_bodies, free_port, pct,  # noqa: E402
                 pinned, proxy_env, stop, wait_http)

SCALE = float(os.environ.get("BENCH_SCALE", "1"))
ROUNDS = max(2, int(4 * SCALE))
COMBINED_PER_ROUND = 3


async def never_answers(port: int) -> asyncio.AbstractServer:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read(-1)  # reads, never answers; the proxy gives up after its budget
        finally:
            writer.close()

    return await asyncio.start_server(handle, HOST, port)


def start_proxy(tmp: Path, name: str, ref_port: int, slow_port: int, extra_env: dict[str, str]):
    data = tmp / name
    data.mkdir()
    config = data / "extproxy.json"
    full = {"filterVerb": "filter", "weight": 1, "httpTimeout": "30s", "nodeCacheCapable": False}
    config.write_text(json.dumps({"backends": [
        {"name": "full-a", "urlPrefix": f"http://{HOST}:{ref_port}/ext", **full},
        {"name": "full-b", "urlPrefix": f"http://{HOST}:{ref_port}/ext", **full},
        {"name": "slow", "urlPrefix": f"http://{HOST}:{slow_port}/x", "prioritizeVerb": "prioritize",
         "weight": 1, "httpTimeout": "2s", "nodeCacheCapable": True},
        {"name": "quick", "urlPrefix": f"http://{HOST}:{ref_port}/ext", "prioritizeVerb": "prioritize",
         "weight": 1, "httpTimeout": "2s", "nodeCacheCapable": True},
    ]}))
    env = proxy_env(config, data)
    env.update(extra_env)
    subprocess.run([PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
    port, ext = free_port(), free_port()
    env["EXTPROXY_EXTENDER_PORT"] = str(ext)
    proc = subprocess.Popen(pinned([UVICORN, "extproxy.asgi:application", "--host", HOST, "--port", str(port),
                                    "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--lifespan", "on"],
                                   PROXY_CORE), cwd=ROOT, env=env)
    wait_http(f"http://{HOST}:{port}/healthz", proc, f"extproxy ({name})")
    return proc, f"http://{HOST}:{ext}"


async def one_round(session: aiohttp.ClientSession, base: str, big: bytes, small: bytes,
                    timeouts: list[float], combined: list[float], quick: list[float]) -> None:
    done = asyncio.Event()

    async def quick_calls() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            async with session.post(f"{base}/extender/quick/prioritize", data=small) as resp:
                await resp.read()
                assert resp.status == 200, resp.status
            quick.append(time.perf_counter() - t0)
            await asyncio.sleep(0.005)

    async def small_calls() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            async with session.post(f"{base}/extender/slow/prioritize", data=small) as resp:
                await resp.read()
                assert resp.status == 504, resp.status
            timeouts.append(time.perf_counter() - t0)

    smalls = [asyncio.create_task(small_calls()) for _ in range(2)] + [asyncio.create_task(quick_calls())]
    await asyncio.sleep(0.2)
    for _ in range(COMBINED_PER_ROUND):
        t0 = time.perf_counter()
        async with session.post(f"{base}/extender/filter", data=big) as resp:
            body = await resp.read()
            assert resp.status == 200 and b'"Error":""' in body, body[:200]
        combined.append(time.perf_counter() - t0)
    done.set()
    await asyncio.gather(*smalls)


async def measure(bases: dict[str, str], big: bytes, small: bytes) -> dict[str, tuple[list[float], list[float], list[float]]]:
    results: dict[str, tuple[list[float], list[float], list[float]]] = {name: ([], [], []) for name in bases}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        for _ in range(ROUNDS):
            for name, base in bases.items():
                await one_round(session, base, big, small, *results[name])
    return results


def main() -> int:
    import uvloop

    tmp = Path(tempfile.mkdtemp(prefix="extproxy-stall-"))
    procs: list[subprocess.Popen] = []
    try:
        big = build_bodies([3600])[("full", 3600)]
        small = json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "d", "uid": "u"}},
                            "Nodes": None, "NodeNames": ["node-00001"]}).encode()
        if PIN:
            os.sched_setaffinity(0, {PROXY_CORE})
        ref_port, slow_port = free_port(), free_port()
        ref = subprocess.Popen(pinned([PYTHON, str(ROOT / "bench" / "refbackend.py"), "--port", str(ref_port)], BACKEND_CORE), cwd=ROOT)
        procs.append(ref)
        wait_http(f"http://{HOST}:{ref_port}/", ref, "reference backend")

        async def run() -> dict:
            server = await never_answers(slow_port)
            try:
                return await measure(bases, big, small)
            finally:
                server.close()

        shipped, shipped_base = start_proxy(tmp, "heavy-lane", ref_port, slow_port, {})
        on_loop, on_loop_base = start_proxy(tmp, "on-loop", ref_port, slow_port, {"EXTPROXY_OFFLOAD_BYTES": str(10**12)})
        procs += [shipped, on_loop]
        bases = {"heavy lane (as shipped)": shipped_base, "on the serving loop": on_loop_base}
        results = uvloop.run(run())
        print(f"\nstall: {len(big) / 1e6:.1f} MB combined filters (3600 Nodes, 2 full-mode backends) with small "
              f"per-backend calls timing out meanwhile (budget 1.8 s); "
              f"{'pinned: extproxy+client core %d, backend core %d' % (PROXY_CORE, BACKEND_CORE) if PIN else 'not pinned'}; "
              f"load average {os.getloadavg()[0]:.2f}")
        for name, (timeouts, combined, quick) in results.items():
            print(f"  {name:24s} timeout answered after: p50 {pct(timeouts, 0.5):.2f} s  p90 {pct(timeouts, 0.9):.2f} s  "
                  f"max {max(timeouts):.2f} s  ({len(timeouts)} calls) | quick calls meanwhile: p50 "
                  f"{pct(quick, 0.5) * 1e3:.1f} ms  p99 {pct(quick, 0.99) * 1e3:.1f} ms  max {max(quick) * 1e3:.0f} ms "
                  f"({len(quick)} calls) | combined call p50 {pct(combined, 0.5):.2f} s max {max(combined):.2f} s")
        return 0
    finally:
        for proc in reversed(procs):
            stop(proc, "process")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
