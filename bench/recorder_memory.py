"""Where the recorder's memory goes under steady load: RSS over time, and what its caches hold.

A report, not a test (bench/README.md, "Recording"). Feeds a spool at a steady rate with
names-mode calls (N=100), each for a Pod not seen before (as a busy cluster sends them), and
every FULL_EVERY-th a full-object call, while a recorder drains it into a fresh database.

    .venv/bin/python bench/recorder_memory.py --seconds 480            # `manage.py recorder`: VmRSS, VmHWM
    .venv/bin/python bench/recorder_memory.py --seconds 480 --in-process   # the Drainer in this process:
                                                                           # RSS and each cache's fill
    .venv/bin/python bench/recorder_memory.py --seconds 480 --in-process --trace

With --in-process, each line also gives what each of the recorder's memories holds (entries,
and bytes as its bound counts them); with --trace, at the end, the lines whose allocations still
held grew most since the first sample (tracemalloc; it slows the recorder and adds to RSS).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

FULL_EVERY = 20


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--seconds", type=float, default=480)
    parser.add_argument("--rate", type=float, default=300, help="calls/s fed into the spool")
    parser.add_argument("--every", type=float, default=20, help="seconds between samples")
    parser.add_argument("--in-process", action="store_true")
    parser.add_argument("--trace", action="store_true", help="with --in-process: tracemalloc from the first sample")
    args = parser.parse_args()

    from recording import Database, reply_for
    from run import build_bodies, proxy_env

    tmp = Path(tempfile.mkdtemp(prefix="extproxy-rec-memory-"))
    db = Database(args.db, tmp)
    recorder = None
    try:
        config = tmp / "extproxy.json"
        config.write_text(json.dumps({"backends": [{"name": "ref", "urlPrefix": "http://127.0.0.1:1/ext",
                                                     "filterVerb": "filter", "nodeCacheCapable": True}]}))
        env = dict(proxy_env(config, tmp), **db.env, EXTPROXY_SPOOL_DIR=str(tmp / "spool"))
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
        os.environ.clear()
        os.environ.update(env, DJANGO_SETTINGS_MODULE="extproxy.settings")
        import django

        django.setup()
        bodies = build_bodies([100])
        names, full = bodies[("names", 100)], bodies[("full", 100)]
        stop = threading.Event()
        if args.in_process:
            drainer = _drainer(tmp / "spool")
            thread = threading.Thread(target=lambda: drainer.run(), daemon=True)
            drainer.stop = stop
            thread.start()
            pid = os.getpid()
        else:
            # Not SCHED_IDLE: on a shared machine it would get too little CPU to drain many calls.
            recorder = subprocess.Popen([sys.executable, "manage.py", "recorder", "--nice", "10", "--no-sched-idle"],
                                        cwd=ROOT, env=env)
            pid, drainer = recorder.pid, None
        feeder = threading.Thread(target=_feed, args=(tmp / "spool", names, full, reply_for, args.rate, stop),
                                  daemon=True)
        feeder.start()
        started = time.monotonic()
        first = None
        print(f"{args.db}, {args.rate:.0f} calls/s fed, every {FULL_EVERY}th full-object (N=100), each a new Pod; "
              f"{'in process' if args.in_process else 'manage.py recorder pid %d' % pid}", flush=True)
        while time.monotonic() - started < args.seconds:
            time.sleep(args.every)
            if args.trace and first is None:
                tracemalloc.start(4)
                first = tracemalloc.take_snapshot()
            print(_sample(pid, tmp / "spool", time.monotonic() - started, drainer), flush=True)
        stop.set()
        if args.in_process:  # what of the RSS is free heap the C library kept, not memory in use
            before = _sample(pid, tmp / "spool", time.monotonic() - started, None).split(" VmRSS=")[1].split(" ")[0]
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
            after = _sample(pid, tmp / "spool", time.monotonic() - started, None).split(" VmRSS=")[1].split(" ")[0]
            print(f"malloc_trim(0): VmRSS {before} kB -> {after} kB", flush=True)
        if first is not None:
            held = [s for s in tracemalloc.take_snapshot().compare_to(first, "lineno") if s.size_diff > 0]
            print(f"held since the first sample: {sum(s.size_diff for s in held) / (1 << 20):.1f} MiB more")
            for stat in held[:15]:
                print(f"  {stat.size_diff / 1024:10.1f} KiB {stat.count_diff:+8d} blocks  {stat.traceback}")
    finally:
        if recorder is not None:
            recorder.terminate()
            recorder.wait(60)
        from django.db import connections

        connections.close_all()
        db.drop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _drainer(spool: Path):
    from extproxy.config import load_config
    from extproxy.recording.writer import Drainer

    cfg = load_config(None)
    return Drainer(spool, cfg.recording, cfg.redaction)


def _feed(spool: Path, names: bytes, full: bytes, reply_for, rate: float, stop: threading.Event) -> None:
    """`rate` calls a second into the spool, in batches of a tenth of a second; each a new Pod."""
    from extproxy.recording.spool import SpoolSettings
    from extproxy.recording.spool_writer import SpoolWriter
    from extproxy.recording.trace import Trace, encode_trace

    writer = SpoolWriter(SpoolSettings(root=spool, max_bytes=1 << 40, fsync="never"))
    templates = [(json.loads(names), reply_for(names), True), (json.loads(full), reply_for(full), False)]
    sent = 0
    started = time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        batch = []
        while sent < due:
            args, reply, names_mode = templates[sent % FULL_EVERY == 0]
            meta = args["Pod"]["metadata"]
            meta["name"], meta["uid"] = f"mem-{sent:08d}", str(uuid.uuid4())
            now = time.time()
            batch.append(encode_trace(Trace(
                verb="filter", backend="ref", url="http://ref/ext", verb_string="filter", started_at=now,
                finished_at=now + 0.0008, request_body=json.dumps(args, separators=(",", ":")).encode(), status=200,
                response_body=reply, answered_status=200, node_cache_capable=names_mode, weight=1)))
            sent += 1
        if batch:
            writer.append(batch)
        stop.wait(0.1)
    writer.close()


def _sample(pid: int, spool: Path, at: float, drainer) -> str:
    from extproxy.recording.observe import read_recorder_counters, spool_status

    status = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            status[key] = value.strip()
    written = read_recorder_counters(spool).get("written", 0) if drainer is None else drainer.counters.written
    line = (f"t={at:5.0f}s written={written} spool depth={spool_status(spool).depth} "
            f"VmRSS={status['VmRSS']} (anon {status['RssAnon']}, file {status['RssFile']}) VmHWM={status['VmHWM']}; load {os.getloadavg()[0]:.2f}")
    if drainer is not None:
        line += f"\n    Python's live blocks {sys.getallocatedblocks()}; " + _caches(drainer)
    return line


def _caches(drainer) -> str:
    from extproxy.recording.rows import VERDICTS

    w, nodes = drainer.writer, drainer.writer.nodes
    return (f"redacted Pods {len(nodes.redact_field._answers)} ({nodes.redact_field.kept_bytes >> 20} MiB); "
            f"stored bodies {len(nodes.stored)} ({nodes.stored.bytes >> 20} MiB); "
            f"node digests {len(nodes._canonical)}/{len(nodes._exact)}; attempts {len(w.attempts._pods)}; "
            f"touched {len(w._touched)}; node sets {len(w.node_sets._known)}; "
            f"verdicts {len(VERDICTS._verdicts)} ({VERDICTS.held} decisions)")


if __name__ == "__main__":
    sys.exit(main())
