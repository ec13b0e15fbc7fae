"""Where a proxied call's time goes: CPU per call of each process, direct against through extproxy.

The latency ratios of `make bench` say how much a call through extproxy costs; this says who
spends it. For one cell (mode, N, one caller), pinned as `make bench` is (this client and
extproxy on one core, the reference backend on the other), it measures alternating batches of
direct and proxied calls and reads the user and kernel CPU time of extproxy's serving process
and of the reference backend from /proc/<pid>/stat, and this client's own from os.times().
Everything on core 0 is on the proxied call's path: the client and extproxy take turns there.

    .venv/bin/python bench/cpu_split.py                     # full N=1000, recording on
    CPU_MODE=names CPU_N=1000 CPU_RECORDING=0 .venv/bin/python bench/cpu_split.py
    CPU_ENV='EXTPROXY_SPOOL_FSYNC=never EXTPROXY_HEAP_KEEP_BYTES=0' ...   # settings for extproxy

With recording on, the recorder process runs beside it as `make run` starts it (on core 0 too,
SCHED_IDLE), and after each proxied batch the next batch waits until the spool is drained, so
that its work is counted with the calls that caused it and does not land in the direct batch.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hop_costs import cpu_split, reference_config, start_reference  # noqa: E402
from run import (BACKEND_CORE, HOST, PIN, PROXY_CORE, PYTHON, ROOT, UVICORN, build_bodies, free_port, pct,  # noqa: E402
                 pinned, proxy_env, stop, wait_http)

MODE = os.environ.get("CPU_MODE", "full")
N = int(os.environ.get("CPU_N", "1000"))
RECORDING = os.environ.get("CPU_RECORDING", "1") != "0"
PER_ROUND = int(os.environ.get("CPU_CALLS", "40" if MODE == "full" else "1000"))
ROUNDS = int(os.environ.get("CPU_ROUNDS", "4"))
EXTRA_ENV = dict(item.split("=", 1) for item in os.environ.get("CPU_ENV", "").split())


async def drained(database: Path, calls: int) -> None:
    """Until the recorder has stored `calls` calls (read from its SQLite database, as bench/run.py does)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5) as db:
            if db.execute("SELECT count(*) FROM extproxy_call").fetchone()[0] >= calls:
                return
    raise RuntimeError(f"the recorder did not store {calls} calls within 300 s")


async def measure(urls: dict[str, str], pids: dict[str, int], body: bytes, database: Path | None) -> None:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64, keepalive_timeout=60),
                                    headers={"Content-Type": "application/json"}, skip_auto_headers=("User-Agent",))

    async def call(url: str) -> None:
        async with session.post(url, data=body) as resp:
            await resp.read()
            assert resp.status == 200

    results = {side: ([], {}) for side in urls}
    proxied = 0
    for url in urls.values():
        for _ in range(5):
            await call(url)
    proxied += 5
    for _ in range(ROUNDS):
        for side, url in urls.items():
            before = {name: cpu_split(pid) for name, pid in pids.items()}
            mine = os.times()
            latencies, cpu = results[side]
            for _ in range(PER_ROUND):
                started = time.perf_counter()
                await call(url)
                latencies.append(time.perf_counter() - started)
            after = os.times()
            now = {name: cpu_split(pid) for name, pid in pids.items()}
            if database and side == "proxied":
                # The recorder's work on this batch, until the batch is stored.
                proxied += PER_ROUND
                await drained(database, proxied)
                now["recorder"] = cpu_split(pids["recorder"])
            for name in pids:
                user, kernel = now[name]
                spent = cpu.setdefault(name, [0.0, 0.0])
                spent[0] += user - before[name][0]
                spent[1] += kernel - before[name][1]
            spent = cpu.setdefault("client", [0.0, 0.0])
            spent[0] += after.user - mine.user
            spent[1] += after.system - mine.system
    await session.close()
    print(f"{'side':8s} {'p50 ms':>8s} {'p99 ms':>8s} | CPU per call in ms, user + kernel")
    for side, (latencies, cpu) in results.items():
        n = len(latencies)
        split = "  ".join(f"{name} {u / n * 1e3:.2f}+{k / n * 1e3:.2f}" for name, (u, k) in cpu.items())
        print(f"{side:8s} {pct(latencies, 0.5) * 1e3:8.2f} {pct(latencies, 0.99) * 1e3:8.2f} | {split}")


def main() -> int:
    import uvloop

    tmp = Path(tempfile.mkdtemp(prefix="extproxy-cpu-"))
    ref = proxy = recorder = None
    try:
        body = build_bodies([N])[(MODE, N)]
        if PIN:
            os.sched_setaffinity(0, {PROXY_CORE})
        ref_port, main_port, ext_port = free_port(), free_port(), free_port()
        ref = start_reference(ref_port)
        config = reference_config(tmp, ref_port, node_cache_capable=MODE == "names", recording=RECORDING)
        env = proxy_env(config, tmp)
        database = tmp / "extproxy.sqlite3"
        env["EXTPROXY_EXTENDER_PORT"] = str(ext_port)
        env.update(EXTRA_ENV)
        subprocess.run([PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
        proxy = subprocess.Popen(pinned([UVICORN, "extproxy.asgi:application", "--host", HOST, "--port", str(main_port),
                                         "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--lifespan", "on"],
                                        PROXY_CORE), cwd=ROOT, env=env)
        wait_http(f"http://{HOST}:{main_port}/healthz", proxy, "extproxy")
        pids = {"extproxy": proxy.pid, "backend": ref.pid}
        if RECORDING:
            recorder = subprocess.Popen(pinned([PYTHON, "manage.py", "recorder"], PROXY_CORE), cwd=ROOT, env=env)
            pids["recorder"] = recorder.pid
        print(f"{MODE} N={N} c=1, recording {'on' if RECORDING else 'off'}{''.join(f', {k}={v}' for k, v in EXTRA_ENV.items())}; "
              f"{'pinned: client+extproxy core %d, backend core %d' % (PROXY_CORE, BACKEND_CORE) if PIN else 'not pinned'}; "
              f"{ROUNDS} x {PER_ROUND} calls per side; load average {os.getloadavg()[0]:.2f}")
        uvloop.run(measure({"direct": f"http://{HOST}:{ref_port}/ext/filter",
                            "proxied": f"http://{HOST}:{ext_port}/extender/ref/filter"},
                           pids, body, database if RECORDING else None))
        print(f"load average at the end {os.getloadavg()[0]:.2f}")
        return 0
    finally:
        stop(recorder, "recorder")
        stop(proxy, "extproxy")
        stop(ref, "reference backend")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
