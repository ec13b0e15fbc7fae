"""The combined form in `make bench`: one call to POST /extender/filter against calling the
same K backends directly, one after another, as the scheduler itself would.

For K = 2 and 3 and for names and full payloads, an extproxy process is started whose K
backends all point at the reference extender (which passes every node, so each backend of
the chain gets the whole list, the worst case for the proxy's conversions). Direct and
proxied turns alternate, as in the per-backend cells. Imported by run.py.
"""
from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

# (mode, N, K backends, calls per side, alternating rounds)
COMBINED_CELLS = [
    ("names", 1000, 2, 300, 4),
    ("names", 1000, 3, 300, 4),
    ("full", 1000, 2, 40, 4),
    ("full", 1000, 3, 40, 4),
]


@dataclass
class CombinedCell:
    mode: str
    n: int
    k: int
    direct: list[float] = field(default_factory=list)
    proxy: list[float] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.mode:5s} N={self.n:<4d} K={self.k}"


def write_combined_config(path: Path, ref_port: int, mode: str, k: int, host: str) -> None:
    backends = [
        {
            "name": f"ref-{i}",
            "urlPrefix": f"http://{host}:{ref_port}/ext{i}",
            "filterVerb": "filter",
            "httpTimeout": "5s",
            "nodeCacheCapable": mode == "names",
        }
        for i in range(1, k + 1)
    ]
    path.write_text(json.dumps({"backends": backends, "recording": {"enabled": True}}))


async def chain_direct(session, urls: list[str], body: bytes) -> float:
    t0 = time.perf_counter()
    for url in urls:
        async with session.post(url, data=body) as resp:
            await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"direct {url}: HTTP {resp.status}")
    return time.perf_counter() - t0


async def one_proxied(session, url: str, body: bytes) -> float:
    t0 = time.perf_counter()
    async with session.post(url, data=body) as resp:
        data = await resp.read()
        if resp.status != 200 or b'"Error":""' not in data:
            raise RuntimeError(f"combined {url}: HTTP {resp.status}: {data[:200]!r}")
    return time.perf_counter() - t0


async def run_combined_cell(bench, cell: CombinedCell, body: bytes, proxy_base: str, ref_port: int,
                            host: str, calls: int, rounds: int) -> None:
    urls = [f"http://{host}:{ref_port}/ext{i}/filter" for i in range(1, cell.k + 1)]
    combined = f"{proxy_base}/extender/filter"
    session = bench.sessions["direct"]
    proxy_session = bench.sessions["proxy"]
    for _ in range(5):  # warm-up: pools, caches
        await chain_direct(session, urls, body)
        await one_proxied(proxy_session, combined, body)
    per_round = max(1, calls // rounds)
    for _ in range(rounds):
        cell.direct += [await chain_direct(session, urls, body) for _ in range(per_round)]
        cell.proxy += [await one_proxied(proxy_session, combined, body) for _ in range(per_round)]


async def measure_combined(bench, bodies, ref_port: int, start_proxy, host: str, scale: float) -> list[CombinedCell]:
    """start_proxy(config_path) -> (process, base_url, stop); one process per (mode, K)."""
    cells = []
    for mode, n, k, calls, rounds in COMBINED_CELLS:
        cell = CombinedCell(mode, n, k)
        process, base, stop = start_proxy(lambda path, m=mode, kk=k: write_combined_config(path, ref_port, m, kk, host))
        try:
            await run_combined_cell(bench, cell, bodies[(mode, n)], base, ref_port, host,
                                    max(rounds, int(calls * scale)), rounds)
        finally:
            stop(process)
        cells.append(cell)
    return cells


def report_combined(cells: list[CombinedCell], pct, ms) -> None:
    print("\ncombined form: one POST /extender/filter vs the same K backends called directly one after another")
    print(f"{'cell':20s} calls | direct p50      p99 | proxy p50      p99 | ratio p50    p99")
    for c in cells:
        d50, d99, p50, p99 = pct(c.direct, 0.5), pct(c.direct, 0.99), pct(c.proxy, 0.5), pct(c.proxy, 0.99)
        print(f"{c.name:20s} {len(c.proxy):5d} | {ms(d50):>10s} {ms(d99):>8s} | {ms(p50):>9s} {ms(p99):>8s} |"
              f" {p50 / d50:8.2f}x {p99 / d99:5.2f}x")


def start_proxy_factory(tmp: Path, python: str, uvicorn: str, root: Path, host: str, free_port, proxy_env,
                        wait_http, stop_process, wrap=lambda cmd: cmd, extender: bool = False):
    """A start_proxy for measure_combined: a fresh data dir and database per process."""
    counter = {"n": 0}

    def start(write):
        counter["n"] += 1
        data = tmp / f"combined-{counter['n']}"
        data.mkdir()
        config = data / "extproxy.json"
        write(config)
        env = proxy_env(config, data)
        subprocess.run([python, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=root, env=env, check=True)
        port = free_port()
        calls_port = port
        if extender:  # the extender listener (listener.py)
            calls_port = free_port()
            env["EXTPROXY_EXTENDER_PORT"] = str(calls_port)
        process = subprocess.Popen(
            wrap([uvicorn, "extproxy.asgi:application", "--host", host, "--port", str(port), "--loop", "uvloop",
                  "--http", "httptools", "--no-access-log", "--lifespan", "on"]),
            cwd=root, env=env,
        )
        recorder = subprocess.Popen(wrap([python, "manage.py", "recorder"]), cwd=root, env=env)  # as `make run` does
        wait_http(f"http://{host}:{port}/healthz", process, "extproxy (combined)")

        def stop_both(p):
            stopped = stop_process(p, "extproxy (combined)")
            stop_process(recorder, "recorder (combined)")
            return stopped

        return process, f"http://{host}:{calls_port}", stop_both

    return start
