"""What a shadow backend costs the scheduler: per-backend latency with and without a shadow.

One extproxy process (uvicorn, as `make run` starts it, recording on) with three backends on the
same reference extender (bench/refbackend.py), names mode, N=100 nodes:

    plain            no shadow
    shadowed-slow    a shadow that answers after 200 ms (slower than the primary's traffic can wait for)
    shadowed-down    a shadow on a port nobody listens on

Filter calls go to the three in alternating batches (c=1 and c=8), so that drift on the machine
hits each alike. Reported: p50 and p99 per backend and their ratio to `plain`, and what the
shadows made of it (compared, dropped: the bounded queue at work). A report, not a test: it
exits non-zero only when something broke (a call failed, an answer differed from `plain`'s).
"""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import (  # noqa: E402  (bench/ is not a package)
    HOST, PYTHON, ROOT, SCALE, UVICORN, Broken, build_bodies, free_port, log, pct, proxy_env, stop, wait_http,
)

BACKENDS = ("plain", "shadowed-slow", "shadowed-down")
CALLS = max(200, int(2000 * SCALE))  # per backend and concurrency
ROUNDS = 10
SLOW_SECONDS = 0.2


def write_config(path: Path, ref_port: int, slow_port: int, down_port: int) -> None:
    common = {"filterVerb": "filter", "prioritizeVerb": "prioritize", "weight": 1, "httpTimeout": "5s",
              "nodeCacheCapable": True}
    ref = f"http://{HOST}:{ref_port}/ext"
    backends = [{"name": name, "urlPrefix": ref, **common} for name in BACKENDS]
    backends += [
        {"name": "slow-shadow", "shadowOf": "shadowed-slow", "urlPrefix": f"http://{HOST}:{slow_port}/ext", **common},
        {"name": "down-shadow", "shadowOf": "shadowed-down", "urlPrefix": f"http://{HOST}:{down_port}/ext", **common},
    ]
    path.write_text(json.dumps({"backends": backends, "recording": {"enabled": True}}, indent=2))


def serve_slow(port: int) -> None:
    """A shadow that takes SLOW_SECONDS per call, then passes every node."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        args = await request.json()
        await asyncio.sleep(SLOW_SECONDS)
        return web.json_response({"NodeNames": args.get("NodeNames"), "FailedNodes": {}, "Error": ""})

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/ext/{verb}", handle)
    app.router.add_get("/", health)
    web.run_app(app, host=HOST, port=port, print=None)


async def measure(base: str, body: bytes) -> dict[tuple[str, int], list[float]]:
    latencies: dict[tuple[str, int], list[float]] = {(b, c): [] for b in BACKENDS for c in (1, 8)}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=16), headers={"Content-Type": "application/json"}) as session:
        expected = None
        for backend in BACKENDS:  # one call each: the answers must be the same bytes
            async with session.post(f"{base}/extender/{backend}/filter", data=body) as resp:
                got = (resp.status, await resp.read())
            if expected is not None and got != expected:
                raise Broken(f"{backend} answered differently from plain: {got[0]} {got[1][:200]!r}")
            expected = got
        for conc in (1, 8):
            per_round = max(1, CALLS // ROUNDS)
            for _ in range(ROUNDS):
                for backend in BACKENDS:
                    url = f"{base}/extender/{backend}/filter"
                    left = per_round

                    async def worker() -> None:
                        nonlocal left
                        while left > 0:
                            left -= 1
                            t0 = time.perf_counter()
                            async with session.post(url, data=body) as resp:
                                data = await resp.read()
                                if (resp.status, data) != expected:
                                    raise Broken(f"{backend}: answer differs from plain's ({resp.status})")
                            latencies[(backend, conc)].append(time.perf_counter() - t0)

                    await asyncio.gather(*(worker() for _ in range(conc)))
    return latencies


async def shadow_metrics(base: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base}/metrics") as resp:
            text = await resp.text()
    return {k: float(v) for k, _, v in (line.rpartition(" ") for line in text.splitlines())
            if k.startswith("extproxy_shadow_") and "_created" not in k}


def report(latencies: dict[tuple[str, int], list[float]], shadow: dict[str, float]) -> None:
    print("\nShadow backends: per-backend latency through extproxy (names, N=100), alternating batches")
    print(f"{'backend':15s} {'c':>2s} {'calls':>6s} {'p50 ms':>8s} {'p99 ms':>8s} {'p50 ratio':>10s} {'p99 ratio':>10s}")
    for conc in (1, 8):
        base50, base99 = pct(latencies[("plain", conc)], 0.5), pct(latencies[("plain", conc)], 0.99)
        for backend in BACKENDS:
            values = latencies[(backend, conc)]
            p50, p99 = pct(values, 0.5), pct(values, 0.99)
            print(f"{backend:15s} {conc:>2d} {len(values):>6d} {p50 * 1000:>8.3f} {p99 * 1000:>8.3f} "
                  f"{p50 / base50:>9.2f}x {p99 / base99:>9.2f}x")
    print("shadow figures (/metrics):")
    for key, value in sorted(shadow.items()):
        print(f"  {key} {value:.0f}")


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-slow":
        serve_slow(int(sys.argv[2]))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="extproxy-shadow-bench-"))
    ref = slow = proxy = None
    code = 0
    try:
        body = build_bodies([100])[("names", 100)]
        ref_port, slow_port, down_port, proxy_port = free_port(), free_port(), free_port(), free_port()
        ref = subprocess.Popen([PYTHON, str(ROOT / "bench" / "refbackend.py"), "--port", str(ref_port)], cwd=ROOT)
        slow = subprocess.Popen([PYTHON, __file__, "--serve-slow", str(slow_port)], cwd=ROOT)
        wait_http(f"http://{HOST}:{ref_port}/", ref, "reference backend")
        wait_http(f"http://{HOST}:{slow_port}/", slow, "slow shadow")
        config = tmp / "extproxy.json"
        write_config(config, ref_port, slow_port, down_port)
        env = proxy_env(config, tmp)
        if subprocess.run([PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env).returncode:
            raise Broken("manage.py migrate failed")
        proxy = subprocess.Popen(
            [UVICORN, "extproxy.asgi:application", "--host", HOST, "--port", str(proxy_port), "--loop", "uvloop",
             "--http", "httptools", "--no-access-log", "--lifespan", "on"], cwd=ROOT, env=env,
        )
        base = f"http://{HOST}:{proxy_port}"
        wait_http(f"{base}/healthz", proxy, "extproxy")
        log(f"shadow bench: {CALLS} calls per backend and concurrency, {ROUNDS} alternating rounds")
        latencies = asyncio.run(measure(base, body))
        report(latencies, asyncio.run(shadow_metrics(base)))
    except (Broken, OSError, aiohttp.ClientError) as exc:
        print(f"shadow bench: broken: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    finally:
        stop(proxy, "extproxy")
        stop(slow, "slow shadow")
        stop(ref, "reference backend")
        shutil.rmtree(tmp, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
