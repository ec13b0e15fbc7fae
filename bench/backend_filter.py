"""`backend=X` on PostgreSQL at a million calls: what the calls filter costs for each kind of
backend, with the filter as it is (api.filters.took_part) and as one `or` of the call's own
backend and a part by it (how it was before the filter looked which side holds rows).

A report, not a test. A fresh database (dropped after) is filled with the combined form's
traffic: CALLS combined calls, each with two parts (gpu, and the built-in policy); one in a
thousand with a third part by `rare`; and CALLS/100 per-backend calls of `solo`. Then, for
`gpu` (parts in every call), `rare`, `solo` (own calls, no parts), `combined` (own calls) and
`typo` (nothing at all): the newest page of 50 and the count, each the median of REPEAT runs.

    .venv/bin/python bench/backend_filter.py            # 1,000,000 calls, about 2 minutes
    BENCH_FILTER_CALLS=200000 .venv/bin/python bench/backend_filter.py
"""
from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
CALLS = int(os.environ.get("BENCH_FILTER_CALLS", "1000000"))
REPEAT = 5
BACKENDS = ("gpu", "rare", "solo", "combined", "typo")

FILL = """
INSERT INTO extproxy_call (verb, backend, form, pod_namespace, pod_name, pod_uid, attempt, started_at,
  finished_at, outcome, http_status, error, node_count, passed_count, failed_count, unresolvable_count,
  findings, request_body, response_body, response_status, decisions_blob, is_replay, call_id)
SELECT 'filter', CASE WHEN i < {solo} THEN 'solo' ELSE 'combined' END,
  CASE WHEN i < {solo} THEN 'per-backend' ELSE 'combined' END, 'default', 'pod-' || i, 'uid-' || i, '',
  now() - make_interval(secs => ({n} - i) / 100.0), now() - make_interval(secs => ({n} - i) / 100.0),
  'ok', 200, '', 3, 3, 0, 0, '[]'::jsonb, ''::bytea, ''::bytea, 200, ''::bytea, false, 'c-' || i
FROM generate_series(0::bigint, {n} - 1) AS i;
INSERT INTO extproxy_backendcall (backend, verb, started_at, finished_at, outcome, http_status, error,
  findings, request_body, response_body, decisions_blob, call_id)
SELECT b, 'filter', c.started_at, c.finished_at, 'ok', 200, '', '[]'::jsonb, ''::bytea, ''::bytea, ''::bytea, c.id
FROM extproxy_call c, unnest(ARRAY['gpu', 'builtin', 'rare']) AS b
WHERE c.backend = 'combined' AND (b <> 'rare' OR c.id % 1000 = 7);
ANALYZE;
"""


def median_ms(run) -> float:
    times = []
    for _ in range(REPEAT):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    import psycopg

    name = f"extproxy_filter_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG + "/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        os.environ["DJANGO_SETTINGS_MODULE"] = "extproxy.settings"
        os.environ["DATABASE_URL"] = f"{PG}/{name}"
        import django

        django.setup()
        measure(name)
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(PG + "/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def measure(name: str) -> None:
    from django.core.management import call_command
    from django.db import connection
    from django.db.models import Exists, OuterRef, Q

    from extproxy.api.filters import took_part
    from extproxy.models import BackendCall, Call

    call_command("migrate", verbosity=0)
    started = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(FILL.replace("{n}", str(CALLS)).replace("{solo}", str(CALLS // 100)))
    print(f"filled {Call.objects.count():,} calls and {BackendCall.objects.count():,} parts "
          f"in {time.monotonic() - started:.0f} s; load average {os.getloadavg()[0]:.2f}")

    def one_or(backend: str) -> Q:
        return Q(backend=backend) | Q(Exists(BackendCall.objects.filter(call=OuterRef("pk"), backend=backend)))

    print(f"{'backend':<10} {'page, one or':>14} {'page, now':>11} {'count, one or':>15} {'count, now':>12}  calls")
    newest = Call.objects.order_by("-started_at", "-id")
    for backend in BACKENDS:
        before, after = newest.filter(one_or(backend)), newest.filter(took_part(backend))
        total = after.count()
        assert total == before.count(), backend
        assert list(after[:50].values_list("id", flat=True)) == list(before[:50].values_list("id", flat=True))
        figures = [
            median_ms(lambda: list(newest.filter(one_or(backend))[:50])),
            median_ms(lambda: list(newest.filter(took_part(backend))[:50])),
            median_ms(lambda: newest.filter(one_or(backend)).count()),
            median_ms(lambda: newest.filter(took_part(backend)).count()),
        ]
        print(f"{backend:<10} {figures[0]:>11.1f} ms {figures[1]:>8.1f} ms {figures[2]:>12.1f} ms "
              f"{figures[3]:>9.1f} ms  {total:,}")
    print(f"(median of {REPEAT} each; 'now' includes took_part's two existence probes; "
          f"load average {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
