"""Where the recorder's CPU goes: drain a pre-filled spool in this process under cProfile.

A report, not a test (bench/README.md, "Recording"). Fills a fresh spool with CALLS calls of one
shape, then runs the recorder's Drainer on it in this process (no start-up in the figure) and
prints the rate and the functions that took the most time, cumulative.

    .venv/bin/python bench/recorder_profile.py                       # names N=100, 5000 calls, SQLite
    .venv/bin/python bench/recorder_profile.py --mode full --nodes 1000 --calls 100
    .venv/bin/python bench/recorder_profile.py --db postgres          # a fresh database on BENCH_PG
    .venv/bin/python bench/recorder_profile.py --no-profile           # the rate alone, without cProfile's cost
    .venv/bin/python bench/recorder_profile.py --no-profile --calls 25000 --rounds 8   # the rate as the table grows
    .venv/bin/python bench/recorder_profile.py --no-profile --calls 25000 --rounds 8 --memory  # where memory grows
    .venv/bin/python bench/recorder_profile.py --no-profile --redact every   # then `manage.py redact`'s rate
    .venv/bin/python bench/recorder_profile.py --no-profile --secret         # every pod with a secret env value

With --redact, the calls drained are then redacted again by `manage.py redact`'s run, under a rule
added to the defaults: `none` matches nothing stored (the cost of reading and judging), `every`
matches an annotation of every Pod and a label of every Node (each body and Node rewritten).

Each line ends with the process's RSS after the round: with --rounds, whether it levels off.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--mode", choices=("names", "full"), default="names")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=1000, help="distinct pods cycled through")
    parser.add_argument("--rounds", type=int, default=1,
                        help="fill and drain this many times into the same database, a line per round; "
                             "cProfile covers the last round")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--memory", action="store_true",
                        help="after the last round, the lines whose allocations still held grew most since the "
                             "end of round 1 (tracemalloc; it slows the recorder several times and adds to RSS)")
    parser.add_argument("--secret", action="store_true",
                        help="give each pod an env value redaction removes (24 characters, its own per pod), "
                             "so the echo search has a value to look for in every call's texts")
    parser.add_argument("--redact", choices=("none", "every"),
                        help="after the rounds, time `manage.py redact` with a rule that matches nothing or every call")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="extproxy-rec-profile-"))
    from recording import Database, bodies_with_pods, prefill
    from run import build_bodies, proxy_env

    db = Database(args.db, tmp)
    try:
        config = tmp / "extproxy.json"
        config.write_text("{}")
        os.environ.clear()
        os.environ.update(proxy_env(config, tmp), **db.env, EXTPROXY_SPOOL_DIR=str(tmp / "spool"))
        os.environ["DJANGO_SETTINGS_MODULE"] = "extproxy.settings"
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", "--noinput", verbosity=0)
        from extproxy.config import load_config
        from extproxy.recording.writer import Drainer

        body = build_bodies([args.nodes])[(args.mode, args.nodes)]
        requests = bodies_with_pods(body, min(args.pods, args.calls))
        if args.secret:
            requests = [_with_secret(request, i) for i, request in enumerate(requests)]
        cfg = load_config(None)
        drainer = Drainer(tmp / "spool", cfg.recording, cfg.redaction)
        profiler = None if args.no_profile else cProfile.Profile()
        first = None
        for round_ in range(1, args.rounds + 1):
            prefill(tmp / "spool", requests, args.calls, names_mode=args.mode == "names")
            written = drainer.counters.written
            started, cpu = time.monotonic(), time.process_time()
            profiling = profiler is not None and round_ == args.rounds  # the last round: the largest table
            if profiling:
                profiler.enable()
            drainer.run(until_idle=True)
            if profiling:
                profiler.disable()
            wall, cpu = time.monotonic() - started, time.process_time() - cpu
            calls = drainer.counters.written - written
            table = f" (round {round_}, {drainer.counters.written} calls in the table)" if args.rounds > 1 else ""
            print(f"{args.db} {args.mode} N={args.nodes}: {calls} calls in {wall:.2f} s = "
                  f"{calls / wall:.0f} calls/s; recorder CPU {cpu / max(1, calls) * 1000:.2f} ms/call{table}"
                  f"{' (under cProfile)' if profiling else ''}; load average {os.getloadavg()[0]:.2f}"
                  f"; RSS {_rss_mib():.1f} MiB", flush=True)
            if args.memory and first is None:
                tracemalloc.start(8)
                first = tracemalloc.take_snapshot()
        if first is not None:
            _print_growth(first, tracemalloc.take_snapshot(), args.top)
        drainer.close()
        if args.redact:
            _redact_again(args, cfg.redaction)
        if profiler:
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(args.top)
            print(out.getvalue())
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(args.top)
            print(out.getvalue())
    finally:
        from django.db import connections

        connections.close_all()
        db.drop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _with_secret(request: bytes, index: int) -> bytes:
    import json

    args = json.loads(request)
    container = args["Pod"]["spec"]["containers"][0]
    container.setdefault("env", []).append({"name": "DB_PASSWORD", "value": f"bench-secret-{index:05d}-0123456"})
    return json.dumps(args, separators=(",", ":")).encode()


def _redact_again(args: argparse.Namespace, rules) -> None:
    """`manage.py redact`'s run over the table just drained (its rate, and what it changed)."""
    import dataclasses

    from extproxy.recording.redact_stored import RedactionRun, record_tables

    added = ("nomatch-xyz",) if args.redact == "none" else ("gpu-memory", r"gpu\.driver")
    rules = dataclasses.replace(rules, name_patterns=rules.name_patterns + added)
    for attempt in ("first run", "run again"):
        started, cpu = time.monotonic(), time.process_time()
        tally = RedactionRun(rules).run(record_tables())
        wall, cpu = time.monotonic() - started, time.process_time() - cpu
        rows = sum(tally.examined.values())
        print(f"redact ({args.redact}, {attempt}): {rows} rows in {wall:.2f} s = {rows / wall:.0f} rows/s, "
              f"CPU {cpu / max(1, rows) * 1000:.3f} ms/row; changed {dict(tally.changed) or 'nothing'}; "
              f"RSS {_rss_mib():.1f} MiB", flush=True)


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def _print_growth(first: tracemalloc.Snapshot, last: tracemalloc.Snapshot, top: int) -> None:
    """What is held now that was not at the end of round 1, by the line that allocated it."""
    held = [s for s in last.compare_to(first, "lineno") if s.size_diff > 0]
    print(f"held since round 1: {sum(s.size_diff for s in held) / (1 << 20):.2f} MiB more of Python's own "
          f"allocations (tracemalloc itself holds {tracemalloc.get_tracemalloc_memory() / (1 << 20):.1f} MiB)")
    for stat in held[:top]:
        print(f"  {stat.size_diff / 1024:10.1f} KiB {stat.count_diff:+8d} blocks  {stat.traceback}")


if __name__ == "__main__":
    sys.exit(main())
