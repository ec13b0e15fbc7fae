"""Why aiohttp is the outbound client: aiohttp vs httpx against the same reference backend.

Not part of `make bench` (httpx is not a dependency). Run it in a scratch venv:
    python3 -m venv /tmp/hx && /tmp/hx/bin/pip install aiohttp==3.14.5 httpx==0.28.1 uvloop msgspec
    /tmp/hx/bin/python bench/compare_clients.py
Measured here (2 cores, names N=1000, c=1, 1800 calls each, alternating turns):
    aiohttp p50 0.302 ms p99 0.456 ms, 5527 calls/s with 64 in flight
    httpx   p50 1.148 ms p99 1.663 ms,  342 calls/s with 64 in flight
"""
import asyncio, json, subprocess, time, socket
from pathlib import Path
import aiohttp, httpx, uvloop
ROOT = Path(__file__).resolve().parent.parent
def free():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
port = free()
ref = subprocess.Popen([str(ROOT / ".venv/bin/python"), str(ROOT / "bench/refbackend.py"), "--port", str(port)])
time.sleep(2)
args = json.load(open(ROOT / "tests/fixtures/filter-request.nodecache-true.json"))
args["NodeNames"] = [f"node-{i:05d}" for i in range(1000)]
body = json.dumps(args).encode()
url = f"http://127.0.0.1:{port}/ext/filter"
def pct(v, q): v = sorted(v); return v[int((len(v) - 1) * q)] * 1e3
async def main():
    a = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64))
    h = httpx.AsyncClient(limits=httpx.Limits(max_connections=64))
    async def one_a():
        async with a.post(url, data=body, headers={"Content-Type": "application/json"}) as r: await r.read()
    async def one_h():
        r = await h.post(url, content=body, headers={"Content-Type": "application/json"}); r.read()
    res = {"aiohttp": [], "httpx": []}
    for _ in range(50): await one_a(); await one_h()
    for _ in range(6):
        for name, f in (("aiohttp", one_a), ("httpx", one_h)):
            for _ in range(300):
                t0 = time.perf_counter(); await f(); res[name].append(time.perf_counter() - t0)
    for name, v in res.items():
        print(f"{name:8s} names N=1000 c=1: p50 {pct(v, .5):.3f} ms  p99 {pct(v, .99):.3f} ms  ({len(v)} calls)")
    for name, f in (("aiohttp", one_a), ("httpx", one_h)):
        t0 = time.perf_counter(); await asyncio.gather(*(f() for _ in range(2000))); dt = time.perf_counter() - t0
        print(f"{name:8s} 2000 calls, 64 in flight: {2000 / dt:.0f} calls/s")
    await a.close(); await h.aclose()
uvloop.run(main())
ref.terminate()
