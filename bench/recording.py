"""Recording throughput: how fast the recorder process drains the spool into SQLite and
PostgreSQL, alone and while extproxy serves names N=100 at concurrency 8.

A report, not a test (see bench/README.md, "Recording"). Two measurements per database:

1. drain rate alone: a spool pre-filled with BENCH_RECORDING_CALLS realistic records (names
   N=100 filter calls: the request, the backend's reply, distinct pods) is drained by
   `manage.py recorder --until-idle`; calls/s = records / (its run time - its start-up time,
   measured on an empty spool just before);
2. sustained: extproxy as in production (uvicorn + `manage.py recorder` at nice 10) in front of
   bench/refbackend.py, loaded with names N=100 c=8 for BENCH_RECORDING_SECONDS; reports the
   serving rate, what was written during the load, the spool's depth and oldest age, the drain
   tail after the load, and every drop by reason.

    .venv/bin/python bench/recording.py                     # both databases, 60 s each
    BENCH_RECORDING_SECONDS=300 .venv/bin/python bench/recording.py   # the issue's 5 minutes
    .venv/bin/python bench/recording.py --db sqlite --pin   # proxy tree + client on CPU 0, backend on CPU 1
    .venv/bin/python bench/recording.py --pin --sustained-only --seconds 300 --rate 2000   # the issue's run
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

from run import HOST, PYTHON, UVICORN, build_bodies, free_port, proxy_env, stop, wait_http  # noqa: E402

PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
SECONDS = float(os.environ.get("BENCH_RECORDING_SECONDS", "60"))
CALLS = int(os.environ.get("BENCH_RECORDING_CALLS", "20000"))
CONCURRENCY = 8
RATE = float(os.environ.get("BENCH_RECORDING_RATE", "0"))  # calls/s offered in all; 0: as fast as served
SPOOL_BYTES = int(os.environ.get("BENCH_RECORDING_SPOOL_BYTES", "0"))  # EXTPROXY_SPOOL_MAX_BYTES; 0: its default
CLIENT = os.environ.get("BENCH_RECORDING_CLIENT", "wire")  # the load client: wire or aiohttp (see sustained_load)
PODS = 1000  # distinct pods cycled through, as a busy cluster sends them


def log(msg: str) -> None:
    print(f"[recording {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def bodies_with_pods(body: bytes, count: int) -> list[bytes]:
    args = json.loads(body)
    out = []
    for i in range(count):
        meta = args["Pod"]["metadata"]
        meta["name"], meta["uid"] = f"bench-{i:05d}", str(uuid.uuid5(uuid.NAMESPACE_DNS, f"bench-{i}"))
        out.append(json.dumps(args, separators=(",", ":")).encode())
    return out


def reply_for(body: bytes) -> bytes:
    """The reference backend's answer: every candidate passes, in the request's mode."""
    args = json.loads(body)
    return json.dumps({"Nodes": args.get("Nodes"), "NodeNames": args.get("NodeNames"), "FailedNodes": {},
                       "FailedAndUnresolvableNodes": {}, "Error": ""}, separators=(",", ":")).encode()


class Database:
    """A fresh SQLite file or a fresh PostgreSQL database (on the shared server, uniquely named)."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind = kind
        self.name = f"extproxy_bench_{uuid.uuid4().hex[:10]}"
        self.env: dict[str, str] = {}
        if kind == "postgres":
            import psycopg

            with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.name}"')
            self.env["DATABASE_URL"] = f"{PG}/{self.name}"
        else:
            self.env["EXTPROXY_SQLITE_PATH"] = str(tmp / f"{self.name}.sqlite3")

    def count_calls(self) -> int:
        """Rows in extproxy_call, read from the database itself (not from the recorder's counters)."""
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(self.env["DATABASE_URL"]) as conn:
                return conn.execute("SELECT count(*) FROM extproxy_call").fetchone()[0]
        import sqlite3

        with sqlite3.connect(self.env["EXTPROXY_SQLITE_PATH"]) as conn:
            return conn.execute("SELECT count(*) FROM extproxy_call").fetchone()[0]

    def drop(self) -> None:
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def environment(tmp: Path, db: Database, ref_port: int) -> dict[str, str]:
    config = tmp / "extproxy.json"
    config.write_text(json.dumps({"backends": [{
        "name": "ref-names", "urlPrefix": f"http://{HOST}:{ref_port}/ext", "filterVerb": "filter",
        "nodeCacheCapable": True, "httpTimeout": "5s"}]}))
    env = dict(proxy_env(config, tmp), **db.env, EXTPROXY_SPOOL_DIR=str(tmp / "spool"))
    if SPOOL_BYTES:
        env["EXTPROXY_SPOOL_MAX_BYTES"] = str(SPOOL_BYTES)
    subprocess.run([PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
    return env


def prefill(spool: Path, requests: list[bytes], calls: int, names_mode: bool = True) -> None:
    from extproxy.recording.spool import SpoolSettings
    from extproxy.recording.spool_writer import SpoolWriter
    from extproxy.recording.trace import Trace, encode_trace

    writer = SpoolWriter(SpoolSettings(root=spool, max_bytes=1 << 40, fsync="never"))
    replies = {}
    batch = []
    for i in range(calls):
        body = requests[i % len(requests)]
        reply = replies.setdefault(i % len(requests), reply_for(body))
        now = time.time()
        batch.append(encode_trace(Trace(
            verb="filter", backend="ref-names", url="http://ref/ext", verb_string="filter", started_at=now,
            finished_at=now + 0.0008, request_body=body, status=200, response_body=reply, answered_status=200,
            node_cache_capable=names_mode, weight=1)))
        if len(batch) == 500:
            writer.append(batch)
            batch = []
    writer.append(batch)
    writer.close()


def timed_drain(env: dict[str, str]) -> float:
    started = time.monotonic()
    subprocess.run([PYTHON, "manage.py", "recorder", "--until-idle", "--nice", "0"], cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def drain_alone(kind: str, requests: list[bytes], ref_port: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="extproxy-rec-bench-"))
    db = Database(kind, tmp)
    try:
        env = environment(tmp, db, ref_port)
        startup = timed_drain(env)  # empty spool: Django, the configuration, the connection
        prefill(tmp / "spool", requests, CALLS)
        total = timed_drain(env)
        return {"calls": CALLS, "startup_s": startup, "run_s": total, "rate": CALLS / max(1e-9, total - startup)}
    finally:
        db.drop()
        shutil.rmtree(tmp, ignore_errors=True)


async def metrics(session: aiohttp.ClientSession, base: str) -> dict[str, float]:
    async with session.get(f"{base}/metrics") as response:
        text = await response.text()
    values = {}
    for line in text.splitlines():
        if line.startswith("extproxy_") and " " in line:
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


async def sustained_load(base: str, requests: list[bytes], seconds: float, pids: dict[str, int]) -> dict:
    answered = failed = 0
    samples: list[dict[str, float]] = []
    rss: dict[str, list[int]] = {name: [] for name in pids}
    deadline = time.monotonic() + seconds
    url = f"{base}/extender/ref-names/filter"

    async def worker(session: aiohttp.ClientSession, offset: int) -> None:
        nonlocal answered, failed
        i = offset
        lean = CLIENT == "wire"
        # With RATE, each worker sends on a schedule of RATE/CONCURRENCY calls a second (a late
        # call goes at once, so a slow proxy shows as a rate below RATE, not as a pause).
        period = CONCURRENCY / RATE if RATE else 0.0
        due = time.monotonic() + period * offset / CONCURRENCY
        while time.monotonic() < deadline:
            if period:
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                due += period
            if lean:
                status = (await wire_client.post(url, requests[i % len(requests)], 1 << 24, False)).status
            else:
                async with session.post(url, data=requests[i % len(requests)]) as response:
                    await response.read()
                    status = response.status
            if status == 200:
                answered += 1
            else:
                failed += 1
            i += CONCURRENCY

    async def sampler(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline:
            await asyncio.sleep(1.0)
            samples.append(await metrics(session, base))
            for name, pid in pids.items():
                rss[name].append(rss_kib(pid))

    # The load client shares core 0 with extproxy when pinned, so its own CPU per call is taken
    # from the recorder: "wire" is extproxy's own HTTP client (httptools on asyncio; ~70 µs of
    # CPU per call against aiohttp's ~180, bench/README.md "What each layer of the hot path
    # costs"), nearer what kube-scheduler's Go client costs; "aiohttp" is what earlier runs used.
    from extproxy.backends.wire import Client

    wire_client = Client(None, limit=CONCURRENCY + 2)
    connector = aiohttp.TCPConnector(limit=CONCURRENCY + 2)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.monotonic()
        await asyncio.gather(sampler(session), *(worker(session, k) for k in range(CONCURRENCY)))
        load_s = time.monotonic() - started
        at_end = await metrics(session, base)
        drain_started = time.monotonic()
        while True:
            now = await metrics(session, base)
            if now.get("extproxy_spool_depth", 0) == 0 and now.get("extproxy_recorder_queue_depth", 0) == 0:
                break
            if time.monotonic() - drain_started > 600:
                break
            await asyncio.sleep(0.2)
        tail_s = time.monotonic() - drain_started
        # No wait for the written count: the recorder saves its counters before it moves its
        # cursor, so the count read with an empty spool is complete; a short one is reported.
    wire_client.close()
    dropped = {k: v for k, v in now.items() if k.startswith("extproxy_recorder_dropped_total") and v}
    return {
        "answered": answered, "failed": failed, "load_s": load_s, "serving_rate": answered / load_s,
        "written_during_load": at_end.get("extproxy_recorder_written_total", 0),
        "written": now.get("extproxy_recorder_written_total", 0), "tail_s": tail_s,
        "max_depth": max((s.get("extproxy_spool_depth", 0) for s in samples), default=0),
        "max_age": max((s.get("extproxy_spool_oldest_age_seconds", 0) for s in samples), default=0),
        "max_disk": max((s.get("extproxy_spool_disk_bytes", 0) for s in samples), default=0),
        "dropped": dropped, "raw": now.get("extproxy_recorder_raw_total", 0), "rss": rss,
    }


def sustained(kind: str, requests: list[bytes], ref_port: int, pin: bool) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="extproxy-rec-bench-"))
    db = Database(kind, tmp)
    serving = recorder = None
    try:
        env = environment(tmp, db, ref_port)
        port = free_port()
        taskset = ["taskset", "-c", "0"] if pin else []
        serving = subprocess.Popen([*taskset, UVICORN, "extproxy.asgi:application", "--host", HOST, "--port", str(port),
                                    "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--lifespan", "on"],
                                   cwd=ROOT, env=env)
        recorder = subprocess.Popen([*taskset, PYTHON, "manage.py", "recorder"], cwd=ROOT, env=env)  # nice 10: the default
        base = f"http://{HOST}:{port}"
        wait_http(f"{base}/healthz", serving, "extproxy")
        result = asyncio.run(sustained_load(base, requests, SECONDS, {"serving": serving.pid, "recorder": recorder.pid}))
        result["recorded_rate"] = result["written"] / (result["load_s"] + result["tail_s"])
        result["rows"] = db.count_calls()
        return result
    finally:
        stop(serving, "extproxy")
        stop(recorder, "recorder")
        db.drop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--pin", action="store_true", help="extproxy, the recorder and this client on CPU 0; backend on CPU 1")
    parser.add_argument("--sustained-only", action="store_true", help="skip the drain-alone measurement")
    parser.add_argument("--seconds", type=float, default=None, help="sustained load duration (BENCH_RECORDING_SECONDS)")
    parser.add_argument("--rate", type=float, default=None,
                        help="calls/s offered by the c=8 client in all (BENCH_RECORDING_RATE; default: as fast as served)")
    parser.add_argument("--spool-bytes", type=int, default=None,
                        help="the spool's bound for this run (BENCH_RECORDING_SPOOL_BYTES; default: extproxy's)")
    parser.add_argument("--client", choices=("wire", "aiohttp"), default=None,
                        help="the load client (BENCH_RECORDING_CLIENT; default wire: extproxy's own, the leaner)")
    args = parser.parse_args()
    global SECONDS, RATE, SPOOL_BYTES, CLIENT
    CLIENT = args.client or CLIENT
    SPOOL_BYTES = args.spool_bytes if args.spool_bytes is not None else SPOOL_BYTES
    SECONDS = args.seconds or SECONDS
    RATE = args.rate if args.rate is not None else RATE
    kinds = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    if args.pin:
        os.sched_setaffinity(0, {0})
    requests = bodies_with_pods(build_bodies([100])[("names", 100)], PODS)
    ref_port = free_port()
    taskset = ["taskset", "-c", "1"] if args.pin else []
    ref = subprocess.Popen([*taskset, PYTHON, str(BENCH / "refbackend.py"), "--port", str(ref_port)], cwd=ROOT)
    try:
        wait_http(f"http://{HOST}:{ref_port}/", ref, "reference backend")
        for kind in kinds:
            if not args.sustained_only:
                log(f"{kind}: draining {CALLS} pre-spooled calls alone")
                alone = drain_alone(kind, requests, ref_port)
                log(f"{kind}: drain alone {alone['rate']:.0f} calls/s ({alone['calls']} calls in "
                    f"{alone['run_s'] - alone['startup_s']:.1f} s after a {alone['startup_s']:.1f} s start-up)")
            log(f"{kind}: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            log(f"{kind}: names N=100 c={CONCURRENCY} for {SECONDS:.0f} s through extproxy + recorder"
                f"{f', {RATE:.0f} calls/s offered' if RATE else ''}{' (pinned)' if args.pin else ''}, {CLIENT} client"
                f"{f', spool bound {SPOOL_BYTES / 2**30:.1f} GiB' if SPOOL_BYTES else ''}")
            r = sustained(kind, requests, ref_port, args.pin)
            log(f"{kind}: served {r['answered']} calls in {r['load_s']:.1f} s = {r['serving_rate']:.0f}/s "
                f"({r['failed']} failed); written during the load {r['written_during_load']:.0f} "
                f"({r['written_during_load'] / r['load_s']:.0f}/s); all {r['written']:.0f} written "
                f"{r['tail_s']:.1f} s after the load ({r['recorded_rate']:.0f}/s overall); spool depth max "
                f"{r['max_depth']:.0f} ({r['max_disk'] / 2**20:.0f} MiB on disk), oldest age max {r['max_age']:.1f} s; dropped {r['dropped'] or 0}; raw {r['raw']:.0f}")
            for name, series in r["rss"].items():
                if series:
                    tenth = max(1, len(series) // 10)
                    log(f"{kind}: RSS {name} MiB: first 10% mean {sum(series[:tenth]) / tenth / 1024:.1f}, last 10% mean "
                        f"{sum(series[-tenth:]) / tenth / 1024:.1f}, max {max(series) / 1024:.1f}")
                    # The shape (levelling off or still rising), not only the ends: the mean of each tenth.
                    chunks = [series[k * tenth:(k + 1) * tenth] for k in range(min(10, len(series) // tenth))]
                    means = [sum(chunk) / len(chunk) / 1024 for chunk in chunks]
                    log(f"{kind}: RSS {name} MiB by tenth of the load: {' '.join(f'{m:.1f}' for m in means)}")
            log(f"{kind}: rows in extproxy_call {r['rows']} (answered {r['answered']}); load average "
                f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            missing = r["answered"] - r["rows"] - sum(r["dropped"].values())
            if missing:
                log(f"{kind}: {missing:.0f} answered calls neither written nor counted as dropped")
                return 1
    finally:
        stop(ref, "reference backend")
    return 0


if __name__ == "__main__":
    sys.exit(main())
