"""What a shadow backend costs the scheduler: per-backend latency with and without a shadow.

extproxy as `make run` starts it: the serving process (uvicorn, recording on; calls go to the
extender listener as bench/run.py sends them, BENCH_PORT=main for the main port), the recorder
and the shadow process (`manage.py shadow`, its production priority: nice +10, SCHED_IDLE), all
pinned with this load client to one core and the backends to the other, as bench/run.py pins.
Three backends on the same reference extender (bench/refbackend.py), names mode, N=100 nodes:

    plain            no shadow
    shadowed-slow    a shadow that answers after 200 ms (slower than the primary's traffic can wait for)
    shadowed-down    a shadow on a port nobody listens on

Filter calls go to the three in alternating batches (c=1 and c=8), so that drift on the machine
hits each alike. After a shadowed batch the bench waits until the shadow process has dealt with
each of its calls (mirrored, or dropped as stale), so its work overlaps its own batch and not
the next backend's; that wait is reported (`catch-up`), with the shadow process's throughput.
Reported: p50 and p99 per backend and their ratio to `plain`, what the shadows made of it
(/metrics), and the load average (the machine may be shared: compare within one run only). A
report, not a test: it exits non-zero only when something broke (a call failed, an answer
differed from `plain`'s, the shadow process did not keep count).
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

from run import (  # noqa: E402  (bench/ is not a package)
    BACKEND_CORE, HOST, PIN, PROXY_CORE, PROXY_PORT_KIND, PYTHON, ROOT, SCALE, UVICORN, Broken, build_bodies,
    free_port, log, pct, pinned, proxy_env, stop, wait_http,
)

BACKENDS = ("plain", "shadowed-slow", "shadowed-down")
CALLS = max(200, int(2000 * SCALE))  # per backend and concurrency
ROUNDS = 10
SLOW_SECONDS = 0.2
SHADOW_OF = {"shadowed-slow": "slow-shadow", "shadowed-down": "down-shadow"}
CATCH_UP_TIMEOUT = 120.0  # per batch; past it the bench goes on and reports the batch as not caught up


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


async def measure(calls_base: str, metrics_base: str, body: bytes) -> tuple[dict, dict]:
    latencies: dict[tuple[str, int], list[float]] = {(b, c): [] for b in BACKENDS for c in (1, 8)}
    catch_up: dict[str, float] = {b: 0.0 for b in SHADOW_OF}
    behind: dict[str, int] = {b: 0 for b in SHADOW_OF}  # batches after which it had not caught up
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=16), headers={"Content-Type": "application/json"}) as session:
        expected = None
        for backend in BACKENDS:  # one call each: the answers must be the same bytes
            async with session.post(f"{calls_base}/extender/{backend}/filter", data=body) as resp:
                got = (resp.status, await resp.read())
            if expected is not None and got != expected:
                raise Broken(f"{backend} answered differently from plain: {got[0]} {got[1][:200]!r}")
            expected = got
        sent = {b: 1 for b in SHADOW_OF}
        for conc in (1, 8):
            per_round = max(1, CALLS // ROUNDS)
            for _ in range(ROUNDS):
                for backend in BACKENDS:
                    url = f"{calls_base}/extender/{backend}/filter"
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
                    if backend in SHADOW_OF:
                        sent[backend] += per_round
                        t0 = time.perf_counter()
                        if not await wait_dealt_with(session, metrics_base, SHADOW_OF[backend], sent[backend]):
                            behind[backend] += 1
                        catch_up[backend] += time.perf_counter() - t0
    return latencies, {"seconds": catch_up, "behind": behind}


def dealt_with(figures: dict[str, float], shadow: str) -> float:
    """Calls the shadow process is done with for one shadow: compared, not comparable, dropped."""
    return sum(v for k, v in figures.items()
               if (k.startswith("extproxy_shadow_calls_total") or k.startswith("extproxy_shadow_dropped_total"))
               and f'shadow="{shadow}"' in k)


def passed_over(figures: dict[str, float]) -> float:
    """Spool records the shadow process never looked at: the recorder had recycled or deleted
    their segment before the tail got there (a shadow slower than the traffic). Of any backend:
    the figure does not say whose calls they were."""
    return sum(v for k, v in figures.items() if k.startswith("extproxy_shadow_skipped_records"))


async def wait_dealt_with(session: aiohttp.ClientSession, base: str, shadow: str, calls: int) -> bool:
    """Until the shadow process has dealt with `calls` calls of `shadow`, records it passed over
    counted as dealt with (without them, a wait after the tail skipped records never ends; with
    them, it may end before the last of its batch was looked at, as records of other backends
    count too); False when it had not within CATCH_UP_TIMEOUT (at SCHED_IDLE it gets no CPU
    while the core is busy with anything else: on a shared machine other work can starve it)."""
    deadline = time.monotonic() + CATCH_UP_TIMEOUT
    while True:
        figures = await shadow_metrics(base, session)
        if dealt_with(figures, shadow) + passed_over(figures) >= calls:
            return True
        if time.monotonic() > deadline:
            log(f"the shadow process had not dealt with {calls} calls of {shadow} after {CATCH_UP_TIMEOUT:.0f}s; going on")
            return False
        await asyncio.sleep(0.1)


async def shadow_metrics(base: str, session: aiohttp.ClientSession | None = None) -> dict[str, float]:
    if session is None:
        async with aiohttp.ClientSession() as own:
            return await shadow_metrics(base, own)
    async with session.get(f"{base}/metrics") as resp:
        text = await resp.text()
    return {k: float(v) for k, _, v in (line.rpartition(" ") for line in text.splitlines())
            if k.startswith("extproxy_shadow_") and "_created" not in k}


def report(latencies: dict[tuple[str, int], list[float]], shadow: dict[str, float], catch_up: dict[str, dict],
           load: tuple[tuple[float, ...], tuple[float, ...]]) -> None:
    print("\nShadow backends: per-backend latency through extproxy (names, N=100), alternating batches; "
          f"calls to the {PROXY_PORT_KIND} port; "
          + (f"extproxy (serving, recorder, shadow process) and this client on core {PROXY_CORE}, backends on core "
             f"{BACKEND_CORE}" if PIN else "nothing pinned"))
    print("load average (1, 5, 15 min) at the start: " + ", ".join(f"{x:.2f}" for x in load[0])
          + "; at the end: " + ", ".join(f"{x:.2f}" for x in load[1]))
    print(f"{'backend':15s} {'c':>2s} {'calls':>6s} {'p50 ms':>8s} {'p99 ms':>8s} {'p50 ratio':>10s} {'p99 ratio':>10s}")
    for conc in (1, 8):
        base50, base99 = pct(latencies[("plain", conc)], 0.5), pct(latencies[("plain", conc)], 0.99)
        for backend in BACKENDS:
            values = latencies[(backend, conc)]
            p50, p99 = pct(values, 0.5), pct(values, 0.99)
            print(f"{backend:15s} {conc:>2d} {len(values):>6d} {p50 * 1000:>8.3f} {p99 * 1000:>8.3f} "
                  f"{p50 / base50:>9.2f}x {p99 / base99:>9.2f}x")
    print("shadow process (waited for after each shadowed batch):")
    for backend, shadow_name in SHADOW_OF.items():
        done = dealt_with(shadow, shadow_name)
        print(f"  {shadow_name:12s} {done:.0f} calls dealt with; catch-up after the batches {catch_up['seconds'][backend]:.1f} s"
              f"; batches after which it had not caught up in {CATCH_UP_TIMEOUT:.0f} s: {catch_up['behind'][backend]}")
    print(f"  spool records the shadow process passed over (recycled before it got there): {passed_over(shadow):.0f}")
    print("shadow figures (/metrics):")
    for key, value in sorted(shadow.items()):
        print(f"  {key} {value:.2f}" if "seconds" in key else f"  {key} {value:.0f}")


def wait_shadow_process(spool: Path, process: subprocess.Popen, timeout: float = 60.0) -> None:
    """Until the shadow process has saved its state once (it follows the spool from then on)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if json.loads((spool / "shadow.json").read_text()).get("pid") == process.pid:
                return
        except (FileNotFoundError, ValueError):
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise Broken("the shadow process did not start")
        time.sleep(0.1)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-slow":
        serve_slow(int(sys.argv[2]))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="extproxy-shadow-bench-"))
    ref = slow = proxy = recorder = shadow_process = None
    code = 0
    try:
        load_start = os.getloadavg()
        body = build_bodies([100])[("names", 100)]
        ref_port, slow_port, down_port, proxy_port = free_port(), free_port(), free_port(), free_port()
        if PIN:
            os.sched_setaffinity(0, {PROXY_CORE})  # the load client shares extproxy's core
        ref = subprocess.Popen(pinned([PYTHON, str(ROOT / "bench" / "refbackend.py"), "--port", str(ref_port)],
                                      BACKEND_CORE), cwd=ROOT)
        slow = subprocess.Popen(pinned([PYTHON, __file__, "--serve-slow", str(slow_port)], BACKEND_CORE), cwd=ROOT)
        wait_http(f"http://{HOST}:{ref_port}/", ref, "reference backend")
        wait_http(f"http://{HOST}:{slow_port}/", slow, "slow shadow")
        config = tmp / "extproxy.json"
        write_config(config, ref_port, slow_port, down_port)
        env = proxy_env(config, tmp)
        if subprocess.run([PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env).returncode:
            raise Broken("manage.py migrate failed")
        extender_port = free_port()
        env["EXTPROXY_EXTENDER_PORT"] = str(extender_port)
        proxy = subprocess.Popen(
            pinned([UVICORN, "extproxy.asgi:application", "--host", HOST, "--port", str(proxy_port), "--loop", "uvloop",
                    "--http", "httptools", "--no-access-log", "--lifespan", "on"], PROXY_CORE), cwd=ROOT, env=env,
        )
        # The recorder and the shadow process beside it, as `make run` starts them, at their own
        # priorities; part of the proxy's process tree, so on the proxy's core too.
        recorder = subprocess.Popen(pinned([PYTHON, "manage.py", "recorder"], PROXY_CORE), cwd=ROOT, env=env)
        shadow_process = subprocess.Popen(pinned([PYTHON, "manage.py", "shadow"], PROXY_CORE), cwd=ROOT, env=env)
        base = f"http://{HOST}:{proxy_port}"
        calls_base = f"http://{HOST}:{extender_port}" if PROXY_PORT_KIND == "extender" else base
        wait_http(f"{base}/healthz", proxy, "extproxy", timeout=180.0)  # a shared, busy core can be slow to start on
        wait_shadow_process(tmp / "spool", shadow_process)
        log(f"shadow bench: {CALLS} calls per backend and concurrency, {ROUNDS} alternating rounds")
        latencies, catch_up = asyncio.run(measure(calls_base, base, body))
        report(latencies, asyncio.run(shadow_metrics(base)), catch_up, (load_start, os.getloadavg()))
    except (Broken, OSError, aiohttp.ClientError) as exc:
        print(f"shadow bench: broken: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    finally:
        stop(shadow_process, "shadow process")
        stop(recorder, "recorder")
        stop(proxy, "extproxy")
        stop(slow, "slow shadow")
        stop(ref, "reference backend")
        shutil.rmtree(tmp, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
