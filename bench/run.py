"""extproxy benchmark: direct calls to a reference extender against the same calls through extproxy.

A report, not a test: it exits 0 when targets are missed and non-zero only when something broke
(a process did not start, a call failed, an answer differed from the direct one).
See bench/README.md for what is measured and how to read the output.

    .venv/bin/python bench/run.py            # or: make bench
    BENCH_SCALE=0.3 .venv/bin/python bench/run.py   # fewer samples per cell (quick look)
"""
from __future__ import annotations

import asyncio
import copy
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import msgspec

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"
PYTHON = str(VENV_BIN / "python") if (VENV_BIN / "python").exists() else sys.executable
UVICORN = str(VENV_BIN / "uvicorn")
FIXTURES = Path(os.environ.get("BENCH_FIXTURES", Path(__file__).resolve().parent.parent / "tests" / "fixtures"))
HOST = "127.0.0.1"
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# As it is judged: extproxy's whole process tree on ONE core, shared with this load client;
# the reference backend on the other core. BENCH_PIN=0 lets the OS place everything.
PIN = os.environ.get("BENCH_PIN", "1") != "0" and len(os.sched_getaffinity(0)) >= 2
CORES = sorted(os.sched_getaffinity(0))
PROXY_CORE, BACKEND_CORE = (CORES[0], CORES[1]) if len(CORES) >= 2 else (CORES[0], CORES[0])
# Which port the proxied calls go to: the extender listener (listener.py, the hot path) or the
# main port (uvicorn's ASGI stack, which also serves /extender/).
PROXY_PORT_KIND = os.environ.get("BENCH_PORT", "extender")
# BENCH_RECORDING=0: recording off, to see what serving alone costs (the targets are judged with it on).
RECORDING = os.environ.get("BENCH_RECORDING", "1") != "0"

from combined_bench import measure_combined, report_combined, start_proxy_factory

warnings.filterwarnings("ignore", "Sending a large body directly", ResourceWarning)

# (mode, N, concurrency, calls per target, alternating rounds)
CELLS = [
    ("names", 100, 1, 600, 6),
    ("names", 100, 8, 2400, 6),
    ("names", 1000, 1, 600, 6),
    ("names", 1000, 8, 1200, 6),
    ("names", 5000, 1, 300, 6),
    ("names", 5000, 8, 400, 4),
    ("full", 100, 1, 300, 6),
    ("full", 100, 8, 400, 4),
    ("full", 1000, 1, 80, 4),
    ("full", 1000, 8, 80, 4),
    ("full", 5000, 1, 16, 4),
    ("full", 5000, 8, 24, 3),
]
if os.environ.get("BENCH_CELLS"):  # e.g. "names:1000:1,full:1000:1" for a quick look at some cells
    _wanted = {tuple(c.split(":")) for c in os.environ["BENCH_CELLS"].split(",")}
    CELLS = [c for c in CELLS if (c[0], str(c[1]), str(c[2])) in _wanted]
SUSTAINED_CALLS = 6000  # the throughput target's own long run (names N=100 c=8)
BACKENDS = {"names": "ref-names", "full": "ref-full"}


class Broken(Exception):
    """Something the benchmark needs did not work: the run is not a valid report."""


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- request bodies ---------------------------------------------------------------------------


def load_fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def make_nodes(template_nodes: list[dict], n: int) -> list[dict]:
    """n realistic Node objects: the fixture's nodes in turn, each renamed node-00001... ."""
    nodes = []
    for i in range(1, n + 1):
        node = copy.deepcopy(template_nodes[(i - 1) % len(template_nodes)])
        name = f"node-{i:05d}"
        md = node.setdefault("metadata", {})
        md["name"] = name
        md["uid"] = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.bench.extproxy"))
        labels = md.get("labels") or {}
        if "kubernetes.io/hostname" in labels:
            labels["kubernetes.io/hostname"] = name
        for addr in (node.get("status") or {}).get("addresses") or ():
            if addr.get("type") == "Hostname":
                addr["address"] = name
            elif addr.get("type") == "InternalIP":
                addr["address"] = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
        spec = node.get("spec") or {}
        if "podCIDR" in spec:
            cidr = f"10.{128 + ((i >> 8) & 127)}.{i & 255}.0/24"
            spec["podCIDR"] = cidr
            spec["podCIDRs"] = [cidr]
        nodes.append(node)
    return nodes


def build_bodies(sizes: list[int]) -> dict[tuple[str, int], bytes]:
    names_req = load_fixture("filter-request.nodecache-true.json")
    full_req = load_fixture("filter-request.nodecache-false.json")
    templates = full_req["Nodes"]["items"]
    bodies = {}
    for n in sizes:
        nodes = make_nodes(templates, n)
        names = [nd["metadata"]["name"] for nd in nodes]
        req = dict(names_req)  # keeps the fixture's key order: Pod, Nodes, NodeNames
        req["Nodes"] = None
        req["NodeNames"] = names
        bodies[("names", n)] = msgspec.json.encode(req)
        req = dict(full_req)
        req["Nodes"] = {"metadata": full_req["Nodes"].get("metadata", {}), "items": nodes}
        req["NodeNames"] = None
        bodies[("full", n)] = msgspec.json.encode(req)
    return bodies


# --- processes --------------------------------------------------------------------------------


def pinned(cmd: list[str], core: int) -> list[str]:
    return ["taskset", "-c", str(core), *cmd] if PIN else cmd


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, what: str, timeout: float = 60.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise Broken(f"{what} exited with code {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise Broken(f"{what} not ready at {url} within {timeout:.0f}s")


def stop(proc: subprocess.Popen | None, what: str, timeout: float = 30.0) -> bool:
    if proc is None or proc.poll() is not None:
        return True
    proc.terminate()
    try:
        proc.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        log(f"{what} did not stop within {timeout:.0f}s of SIGTERM; killing it")
        proc.kill()
        proc.wait(10)
        return False


def peak_rss_kib(pid: int) -> tuple[int, int]:
    """(VmHWM, VmRSS) in KiB from /proc/<pid>/status."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            values[key] = int(rest.split()[0])
    return values.get("VmHWM", 0), values.get("VmRSS", 0)


def proxy_env(config: Path, data_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    for var in ("DATABASE_URL", "EXTPROXY_SQLITE_PATH", "EXTPROXY_REDIS_URL", "EXTPROXY_SKIP_CONFIG_CHECK"):
        env.pop(var, None)
    env["EXTPROXY_CONFIG"] = str(config)
    env["EXTPROXY_DATA_DIR"] = str(data_dir)
    env.setdefault("EXTPROXY_LOG_LEVEL", "WARNING")
    return env


def write_config(path: Path, ref_port: int) -> None:
    prefix = f"http://{HOST}:{ref_port}/ext"
    common = {"urlPrefix": prefix, "filterVerb": "filter", "prioritizeVerb": "prioritize", "weight": 1, "httpTimeout": "5s"}
    config = {
        "backends": [
            {"name": "ref-names", **common, "nodeCacheCapable": True},
            {"name": "ref-full", **common, "nodeCacheCapable": False},
        ],
        "recording": {"enabled": RECORDING},
    }
    path.write_text(json.dumps(config, indent=2))


# --- measuring --------------------------------------------------------------------------------


@dataclass
class Side:
    latencies: list[float] = field(default_factory=list)
    busy: float = 0.0  # wall time of this side's batches
    calls: int = 0


@dataclass
class Cell:
    mode: str
    n: int
    conc: int
    direct: Side = field(default_factory=Side)
    proxy: Side = field(default_factory=Side)
    drain: float = 0.0  # time the recorder needed after the proxy batches
    rounds: int = 0
    body_bytes: int = 0
    sustained: tuple[int, float, float] | None = None  # (calls, answered in s, answered+recorded in s)

    @property
    def name(self) -> str:
        return f"{self.mode:5s} N={self.n:<4d} c={self.conc}"


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class Bench:
    def __init__(self, ref_port: int, proxy_port: int, db_path: Path, calls_port: int) -> None:
        self.ref_url = f"http://{HOST}:{ref_port}/ext/filter"
        self.proxy_base = f"http://{HOST}:{proxy_port}"  # /metrics
        self.calls_base = f"http://{HOST}:{calls_port}"  # the extender calls
        self.db_path = db_path
        self.proxied = 0  # every call sent through the proxy, warm-ups included
        self.failures: list[str] = []
        self.sessions: dict[str, aiohttp.ClientSession] = {}

    def proxy_url(self, mode: str) -> str:
        return f"{self.calls_base}/extender/{BACKENDS[mode]}/filter"

    async def open(self) -> None:
        for side in ("direct", "proxy", "meta"):
            self.sessions[side] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=16, keepalive_timeout=60),
                timeout=aiohttp.ClientTimeout(total=60),
                headers={"Content-Type": "application/json"},
                skip_auto_headers=("User-Agent",),
            )

    async def close(self) -> None:
        for s in self.sessions.values():
            await s.close()

    async def call(self, side: str, url: str, body: bytes) -> tuple[int, bytes]:
        async with self.sessions[side].post(url, data=body) as resp:
            return resp.status, await resp.read()

    async def batch(self, side: str, url: str, body: bytes, count: int, conc: int) -> tuple[list[float], float]:
        latencies: list[float] = []
        left = count
        perf = time.perf_counter
        session = self.sessions[side]

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                t0 = perf()
                async with session.post(url, data=body) as resp:
                    await resp.read()
                    status = resp.status
                latencies.append(perf() - t0)
                if status != 200 and len(self.failures) < 20:
                    self.failures.append(f"{side} {url}: HTTP {status}")

        if side == "proxy":
            self.proxied += count
        t0 = perf()
        await asyncio.gather(*(worker() for _ in range(conc)))
        return latencies, perf() - t0

    # recorder state --------------------------------------------------------------------------
    def recorded(self) -> int:
        with sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=5) as db:
            return db.execute("SELECT count(*) FROM extproxy_call").fetchone()[0]

    async def metrics(self) -> dict[str, float]:
        async with self.sessions["meta"].get(f"{self.proxy_base}/metrics") as resp:
            text = await resp.text()
        out = {}
        for line in text.splitlines():
            if line.startswith("extproxy_recorder_") and " " in line:
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    async def drain(self, timeout: float = 90.0) -> tuple[int, float]:
        """Wait until every proxied call is written (or dropped); returns (recorded, dropped)."""
        if not RECORDING:
            return 0, 0.0
        deadline = time.monotonic() + timeout
        last_metrics = 0.0
        dropped = 0.0
        while True:
            recorded = self.recorded()
            if recorded >= self.proxied:
                return recorded, dropped
            now = time.monotonic()
            if now - last_metrics > 0.5:
                last_metrics = now
                m = await self.metrics()
                dropped = m.get("extproxy_recorder_dropped_total", 0.0)
                if recorded + dropped >= self.proxied and m.get("extproxy_recorder_queue_depth", 0) == 0:
                    return recorded, dropped
            if now > deadline:
                log(f"recorder did not drain within {timeout:.0f}s: {recorded} of {self.proxied} recorded")
                return recorded, dropped
            await asyncio.sleep(0.02)

    # one cell --------------------------------------------------------------------------------
    async def run_cell(self, cell: Cell, body: bytes, calls: int, rounds: int) -> None:
        direct, proxied = self.ref_url, self.proxy_url(cell.mode)
        cell.body_bytes = len(body)
        # The proxy must hand back the backend's bytes unchanged.
        d_status, d_body = await self.call("direct", direct, body)
        p_status, p_body = await self.call("proxy", proxied, body)
        self.proxied += 1
        if (d_status, d_body) != (p_status, p_body):
            raise Broken(
                f"{cell.name}: proxied answer differs from the direct one "
                f"(direct {d_status}/{len(d_body)} bytes, proxy {p_status}/{len(p_body)} bytes: {p_body[:200]!r})"
            )
        warm = max(cell.conc * 2, min(50, calls // 10))
        await self.batch("direct", direct, body, warm, cell.conc)
        await self.batch("proxy", proxied, body, warm, cell.conc)
        await self.drain()
        per_round = max(cell.conc, calls // rounds)
        for _ in range(rounds):
            for side_name, url in (("direct", direct), ("proxy", proxied)):
                lat, wall = await self.batch(side_name, url, body, per_round, cell.conc)
                side = getattr(cell, side_name)
                side.latencies += lat
                side.busy += wall
                side.calls += len(lat)
            # The proxy's recorder works after its batch; let it finish so that it does not
            # compete with the next direct batch for the 2 cores. Its time is reported.
            t0 = time.perf_counter()
            await self.drain()
            cell.drain += time.perf_counter() - t0
            cell.rounds += 1

    async def sustained(self, cell: Cell, body: bytes, calls: int) -> None:
        """One long proxied run: how long until every call is answered, and until it is recorded."""
        await self.drain()
        t0 = time.perf_counter()
        await self.batch("proxy", self.proxy_url(cell.mode), body, calls, cell.conc)
        answered = time.perf_counter() - t0
        await self.drain()
        cell.sustained = (calls, answered, time.perf_counter() - t0)


# --- report -----------------------------------------------------------------------------------


def ms(v: float) -> str:
    return f"{v * 1000:8.2f}"


def report(cells: list[Cell], recorded: int, proxied: int, dropped: float, rss: tuple[int, int], ref_rss: tuple[int, int], elapsed: float) -> None:
    print()
    print(f"extproxy benchmark: filter, direct (client -> reference extender) vs through extproxy "
          f"(recording {'on' if RECORDING else 'OFF'})")
    print(f"latency in ms; throughput in calls/s; ratio = proxy / direct; {os.cpu_count()} CPUs; total run {elapsed:.0f}s")
    print(f"proxied calls to the {PROXY_PORT_KIND} port; "
          + (f"extproxy (whole process tree) and the load client pinned to core {PROXY_CORE}, the backend to core {BACKEND_CORE}"
             if PIN else "nothing pinned")
          + f"; load average at start {LOAD_AT_START[0]:.2f}, at the end {os.getloadavg()[0]:.2f} (other work on the machine)")
    print()
    head = (
        f"{'cell':18s} {'body':>8s} {'calls':>5s} | {'direct p50':>10s} {'p99':>8s} | {'proxy p50':>9s} {'p99':>8s} | "
        f"{'ratio p50':>9s} {'p99':>6s} | {'thr direct':>10s} {'proxy':>7s} | {'rec lag':>7s}"
    )
    print(head)
    print("-" * len(head))
    for c in cells:
        d, p = c.direct, c.proxy
        dp50, dp99, pp50, pp99 = pct(d.latencies, 0.5), pct(d.latencies, 0.99), pct(p.latencies, 0.5), pct(p.latencies, 0.99)
        td = d.calls / d.busy if d.busy else 0
        tp = p.calls / p.busy if p.busy else 0
        lag = c.drain / c.rounds if c.rounds else 0
        size = f"{c.body_bytes / 1e6:.2f}MB" if c.body_bytes >= 1e5 else f"{c.body_bytes / 1e3:.1f}kB"
        print(
            f"{c.name:18s} {size:>8s} {p.calls:5d} | {ms(dp50):>10s} {ms(dp99):>8s} | {ms(pp50):>9s} {ms(pp99):>8s} | "
            f"{pp50 / dp50:8.2f}x {pp99 / dp99:5.2f}x | {td:10.0f} {tp:7.0f} | {lag:6.2f}s"
        )
    print()
    print("rec lag = seconds from the end of a proxied batch until its last call was in the database (mean per batch)")
    print()

    def get(mode: str, n: int, conc: int) -> Cell | None:
        return next((c for c in cells if (c.mode, c.n, c.conc) == (mode, n, conc)), None)

    print("targets:")
    c = get("names", 1000, 1)
    if c is not None:
        r50 = pct(c.proxy.latencies, 0.5) / pct(c.direct.latencies, 0.5)
        r99 = pct(c.proxy.latencies, 0.99) / pct(c.direct.latencies, 0.99)
        print(f"  names N=1000 c=1: p50 <= 1.5x direct: {r50:.2f}x  {'MET' if r50 <= 1.5 else 'MISSED'}")
        print(f"  names N=1000 c=1: p99 <= 2x direct:   {r99:.2f}x  {'MET' if r99 <= 2 else 'MISSED'}")
    c = get("full", 1000, 1)
    if c is not None:
        r50 = pct(c.proxy.latencies, 0.5) / pct(c.direct.latencies, 0.5)
        print(f"  full  N=1000 c=1: p50 <= 1.15x direct: {r50:.2f}x  {'MET' if r50 <= 1.15 else 'MISSED'}")
    c = get("names", 100, 8)
    if c is None or c.sustained is None:
        print(f"\nrecords vs calls: {proxied} calls through the proxy, {recorded} recorded, "
              f"extproxy_recorder_dropped_total {dropped:.0f}")
        return
    tp = c.proxy.calls / c.proxy.busy
    every = recorded == proxied and dropped == 0
    s_calls, s_answered, s_recorded = c.sustained
    s_tp, s_tpr = s_calls / s_answered, s_calls / s_recorded
    ok = tp >= 2000 and s_tpr >= 2000 and every
    print(
        f"  names N=100  c=8: >= 2000 calls/s through the proxy, every call recorded: "
        f"{tp:.0f} calls/s in the alternating batches; sustained run of {s_calls} calls: {s_tp:.0f} calls/s answered, "
        f"{s_tpr:.0f} calls/s answered and recorded ({s_recorded - s_answered:.2f}s recorder tail); "
        f"{'all' if every else 'NOT all'} calls recorded  {'MET' if ok else 'MISSED'}"
    )
    print()
    print(f"records vs calls: {proxied} calls through the proxy, {recorded} recorded, "
          f"extproxy_recorder_dropped_total {dropped:.0f}")
    print(f"proxy process peak RSS (VmHWM): {rss[0] / 1024:.0f} MiB (VmRSS at the end {rss[1] / 1024:.0f} MiB); "
          f"reference backend VmHWM {ref_rss[0] / 1024:.0f} MiB")


# --- main -------------------------------------------------------------------------------------


async def measure(bench: Bench, bodies: dict, started: float, combined_start=None, ref_port: int = 0) -> list[Cell]:
    await bench.open()
    cells = []
    try:
        for mode, n, conc, calls, rounds in CELLS:
            calls = max(conc * rounds, int(calls * SCALE))
            cell = Cell(mode, n, conc)
            t0 = time.monotonic()
            await bench.run_cell(cell, bodies[(mode, n)], calls, rounds)
            if (mode, n, conc) == ("names", 100, 8):
                await bench.sustained(cell, bodies[(mode, n)], max(500, int(SUSTAINED_CALLS * SCALE)))
            cells.append(cell)
            log(f"{cell.name}: {cell.proxy.calls} calls per side in {time.monotonic() - t0:.1f}s "
                f"(recorder drain {cell.drain:.1f}s; {time.monotonic() - started:.0f}s so far)")
        recorded, dropped = await bench.drain(timeout=120)
        m = await bench.metrics()
        dropped = m.get("extproxy_recorder_dropped_total", dropped)
        bench.final = (recorded, dropped)
        bench.combined = []
        if combined_start is not None and os.environ.get("BENCH_COMBINED", "1") != "0":
            log("combined form: one extproxy process per (mode, K)")
            bench.combined = await measure_combined(bench, bodies, ref_port, combined_start, HOST, SCALE)
    finally:
        await bench.close()
    return cells


LOAD_AT_START = os.getloadavg()


def main() -> int:
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="extproxy-bench-"))
    ref = proxy = recorder = None
    code = 0
    try:
        log("building request bodies")
        bodies = build_bodies(sorted({n for _, n, *_ in CELLS}))
        ref_port, proxy_port = free_port(), free_port()
        if PIN:
            os.sched_setaffinity(0, {PROXY_CORE})  # the load client shares extproxy's core
        ref = subprocess.Popen(pinned([PYTHON, str(ROOT / "bench" / "refbackend.py"), "--port", str(ref_port)], BACKEND_CORE), cwd=ROOT)
        wait_http(f"http://{HOST}:{ref_port}/", ref, "reference backend")

        config = tmp / "extproxy.json"
        write_config(config, ref_port)
        env = proxy_env(config, tmp)
        log("migrating a fresh SQLite database")
        mig = subprocess.run([PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env)
        if mig.returncode != 0:
            raise Broken(f"manage.py migrate failed with code {mig.returncode}")
        extender_port = free_port()
        env["EXTPROXY_EXTENDER_PORT"] = str(extender_port)
        proxy = subprocess.Popen(
            pinned([UVICORN, "extproxy.asgi:application", "--host", HOST, "--port", str(proxy_port), "--loop", "uvloop",
                    "--http", "httptools", "--no-access-log", "--lifespan", "on"], PROXY_CORE),
            cwd=ROOT, env=env,
        )
        # The recorder process beside it, as `make run` starts it (it drains the spool into the
        # database); part of the proxy's process tree, so on the proxy's core too.
        recorder = subprocess.Popen(pinned([PYTHON, "manage.py", "recorder"], PROXY_CORE), cwd=ROOT, env=env)
        wait_http(f"http://{HOST}:{proxy_port}/healthz", proxy, "extproxy")
        log(f"reference backend pid {ref.pid} on :{ref_port}, extproxy pid {proxy.pid} on :{proxy_port} "
            f"(extender listener :{extender_port}); proxied calls go to the {PROXY_PORT_KIND} port; "
            + (f"extproxy and this client pinned to core {PROXY_CORE}, the backend to core {BACKEND_CORE}" if PIN else "not pinned"))

        import uvloop

        bench = Bench(ref_port, proxy_port, tmp / "extproxy.sqlite3",
                      extender_port if PROXY_PORT_KIND == "extender" else proxy_port)
        combined_start = start_proxy_factory(tmp, PYTHON, UVICORN, ROOT, HOST, free_port, proxy_env, wait_http, stop,
                                             wrap=lambda cmd: pinned(cmd, PROXY_CORE), extender=PROXY_PORT_KIND == "extender")
        cells = uvloop.run(measure(bench, bodies, started, combined_start, ref_port))
        recorded, dropped = bench.final
        rss, ref_rss = peak_rss_kib(proxy.pid), peak_rss_kib(ref.pid)
        report(cells, recorded, bench.proxied, dropped, rss, ref_rss, time.monotonic() - started)
        report_combined(bench.combined, pct, ms)
        if bench.failures:
            print("\nFAILED CALLS:", *bench.failures, sep="\n  ")
            code = 1
    except Broken as exc:
        print(f"bench: broken: {exc}", file=sys.stderr)
        code = 1
    except (OSError, aiohttp.ClientError, asyncio.TimeoutError) as exc:
        print(f"bench: broken: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    finally:
        if not stop(proxy, "extproxy"):
            code = code or 1
        stop(recorder, "recorder")
        stop(ref, "reference backend")
        shutil.rmtree(tmp, ignore_errors=True)
    return code


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
