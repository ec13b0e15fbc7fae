"""What a dashboard page costs the server with 1 M recorded calls (24 hours of history), against
the same pages with 1 hour of history at the same rate (41.7 k calls), measured side by side (a
benchmark, not a test; run by `make bench`). Windows up to an hour hold the same traffic in
both, so their ratio is what the table's size costs; the 24-hour backends view reads 24 times
the traffic.

Two throwaway PostgreSQL databases (unique names, dropped at the end) are filled in bulk SQL
(generate_series, never through the proxy) with calls shaped like per-backend traffic at
11.6 calls/s: attempts of filter (gpu), filter (zone), prioritize (gpu) and bind (gpu),
2 % errors, 1 % timeouts, one attempt in 50 left without a node (pending). The roll-up then
counts them (its one-time catch-up is timed too). Each page is requested through Django's test
client in this process, alternating the small and the large database, and its server time
(request in, response out) reported as p50/p90 per page, with the ratio large/small.

    .venv/bin/python bench/pages.py               # 1 M calls (PAGES_CALLS to change)
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
import uuid
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PG = os.environ.get("PAGES_PG", "postgresql://postgres@127.0.0.1:5432")
LARGE = int(os.environ.get("PAGES_CALLS", "1000000"))
SMALL = LARGE // 24  # one hour at the large database's rate
RATE = LARGE / 86400.0  # calls per second in both
ROUNDS = int(os.environ.get("PAGES_ROUNDS", "7"))
GOAL_MS = 300

NODES = [f"node-{i:02d}" for i in range(1, 6)]


def blob(data) -> bytes:
    return zlib.compress(json.dumps(data).encode(), 1)


def decisions(backend: str, passed: int) -> bytes:
    out = []
    for i, node in enumerate(NODES):
        ok = i < passed
        out.append({"node": node, "backend": backend, "result": "passed" if ok else "failed",
                    "reason": None if ok else "example.com/gpu: all devices busy", "score": None, "weighted_score": None})
    return blob(out)


def scores() -> bytes:
    return blob([{"node": n, "backend": "gpu", "result": "scored", "reason": None, "score": 8 - i,
                  "weighted_score": (8 - i) * 20} for i, n in enumerate(NODES[:2])])


def request(pod: str) -> bytes:
    body = {"Pod": {"metadata": {"name": pod, "namespace": "bench", "uid": "uid", "labels": {"app": "bench"}},
                    "spec": {"containers": [{"name": "c"}]}}, "Nodes": None, "NodeNames": NODES}
    return zlib.compress(b"C" + json.dumps(body).encode(), 1)


FILL = """
INSERT INTO extproxy_call (call_id, is_replay, verb, backend, form, pod_namespace, pod_name, pod_uid, attempt,
    started_at, finished_at, outcome, http_status, error, node_count, passed_count, failed_count, unresolvable_count,
    findings, request_body, response_body, response_status, decisions_blob)
SELECT
  'bench-' || i, false,
  (ARRAY['filter','filter','prioritize','bind'])[mod(i, 4) + 1],
  (ARRAY['gpu','zone','gpu','gpu'])[mod(i, 4) + 1],
  'per-backend', 'bench', 'pod-' || mod(i / 4, 200000), 'uid-' || mod(i / 4, 200000), 'a-' || (i / 4),
  now() - make_interval(secs => ({n} - i) / {rate}),
  now() - make_interval(secs => ({n} - i) / {rate}) + make_interval(secs => (1 + mod(i * 7919, 400)) / 1000.0),
  CASE WHEN mod(i, 100) = 7 THEN 'timeout' WHEN mod(i, 50) = 3 THEN 'error' ELSE 'ok' END,
  200, '', 5,
  CASE WHEN mod(i, 4) = 0 AND mod(i / 4, 50) = 0 THEN 0 WHEN mod(i, 4) < 2 THEN 2 ELSE 0 END,
  CASE WHEN mod(i, 4) = 0 AND mod(i / 4, 50) = 0 THEN 5 WHEN mod(i, 4) < 2 THEN 3 ELSE 0 END,
  0, '[]'::jsonb, %(req)s, ''::bytea, 200,
  CASE WHEN mod(i, 4) = 0 AND mod(i / 4, 50) = 0 THEN %(none)s WHEN mod(i, 4) = 0 THEN %(gpu)s
       WHEN mod(i, 4) = 1 THEN %(zone)s WHEN mod(i, 4) = 2 THEN %(scores)s ELSE ''::bytea END
FROM generate_series(0::bigint, {n} - 1) AS i
"""


def create_db(calls: int) -> str:
    import psycopg

    name = f"extproxy_pages_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG + "/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_db(name: str) -> None:
    import psycopg

    with psycopg.connect(PG + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def setup_django(databases: dict[str, str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "extproxy.settings")
    os.environ["DATABASE_URL"] = f"{PG}/{databases['small']}"
    import django
    from django.conf import settings

    django.setup()
    for alias, name in databases.items():
        settings.DATABASES[alias] = dict(settings.DATABASES["default"], NAME=name)


def fill(alias: str, calls: int) -> float:
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", database=alias, verbosity=0)
    started = time.monotonic()
    with connections[alias].cursor() as cursor:
        cursor.execute(FILL.replace("{n}", str(int(calls))).replace("{rate}", repr(RATE)), {
            "req": request("pod"), "none": decisions("gpu", 0), "gpu": decisions("gpu", 2),
            "zone": decisions("zone", 2), "scores": scores()})
        cursor.execute("ANALYZE")
    return time.monotonic() - started


def pages() -> list[str]:
    return ["/", "/feed/attempts/", "/feed/calls/", "/feed/summary/", "/pods/bench/pod-17/", "/pending/",
            "/backends/", "/backends/?minutes=1440"]


def measure(databases: dict[str, str]) -> dict:
    from django.contrib.auth.models import User
    from django.db import connections
    from django.test import Client
    from django.test.utils import setup_test_environment

    from dashboard import feed, rollup

    setup_test_environment()
    results: dict = {alias: {p: [] for p in pages()} for alias in databases}
    clients = {}
    for alias in databases:
        connections["default"] = connections[alias]
        User.objects.create_superuser(f"bench-{alias}", "", "pw")
        started = time.monotonic()
        while rollup.catch_up() == rollup.PASS_ROWS:
            pass
        results[alias]["catch_up_s"] = time.monotonic() - started
        client = Client()
        client.login(username=f"bench-{alias}", password="pw")
        clients[alias] = client
    for _ in range(ROUNDS):
        for alias in databases:  # alternating: drift on the machine hits both alike
            connections["default"] = connections[alias]
            feed._summary_cache.clear()  # measure the work, not the band's 10 s cache
            for path in pages():
                started = time.perf_counter()
                response = clients[alias].get(path)
                elapsed = (time.perf_counter() - started) * 1000
                assert response.status_code == 200, (alias, path, response.status_code)
                results[alias][path].append(elapsed)
    return results


def main() -> int:
    databases = {"small": create_db(SMALL), "large": create_db(LARGE)}
    try:
        setup_django(databases)
        os.environ.setdefault("EXTPROXY_SKIP_CONFIG_CHECK", "1")
        filled = {alias: fill(alias, n) for alias, n in (("small", SMALL), ("large", LARGE))}
        results = measure(databases)
        print(f"\ndashboard pages, server time (Django test client in-process, PostgreSQL), {ROUNDS} rounds alternating")
        print(f"same rate ({RATE:.1f} calls/s); bulk fill: {SMALL} calls {filled['small']:.1f}s, {LARGE} calls {filled['large']:.1f}s; roll-up catch-up: "
              f"{results['small']['catch_up_s']:.1f}s / {results['large']['catch_up_s']:.1f}s")
        print(f"{'page':<28} {'1h p50':>8} {'1h p90':>8} {'24h p50':>8} {'24h p90':>8} {'ratio p50':>9}  goal <{GOAL_MS} ms")
        for path in pages():
            small, large = results["small"][path], results["large"][path]
            s50, l50 = statistics.median(small), statistics.median(large)
            s90 = sorted(small)[int(0.9 * (len(small) - 1))]
            l90 = sorted(large)[int(0.9 * (len(large) - 1))]
            mark = "ok" if l90 < GOAL_MS else "MISSED"
            print(f"{path:<28} {s50:8.1f} {s90:8.1f} {l50:8.1f} {l90:8.1f} {l50 / s50:9.2f}  {mark}")
        return 0
    finally:
        from django.db import connections

        for conn in connections.all():
            conn.close()
        for name in databases.values():
            drop_db(name)


if __name__ == "__main__":
    sys.exit(main())
