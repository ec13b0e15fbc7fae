"""`backend=X` for a backend with its own calls only, all of them old (a per-backend setup since
made combined, a backend since removed): PostgreSQL's planner walked the newest-first index
expecting to meet X's calls early, and read every newer call first (over 100 ms a page at
200,000 calls where the others took about 10). The listing is now bounded by X's newest call
and the walk starts there. The API's own query on a real PostgreSQL, read with EXPLAIN ANALYZE:
the rows it reads are counted, not timed."""
from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                                reason="PostgreSQL only (DATABASE_URL): its planner's choice")

NEWER, OLD = 20_000, 1_000

FILL = """
INSERT INTO extproxy_call (verb, backend, form, pod_namespace, pod_name, pod_uid, attempt, started_at,
  finished_at, outcome, http_status, error, node_count, passed_count, failed_count, unresolvable_count,
  findings, request_body, response_body, response_status, decisions_blob, is_replay, call_id)
SELECT 'filter', CASE WHEN i < %(old)s THEN 'solo' ELSE 'combined' END,
  CASE WHEN i < %(old)s THEN 'per-backend' ELSE 'combined' END, 'default', 'pod-' || i, 'uid-' || i, '',
  now() - make_interval(secs => (%(n)s - i) / 100.0), now() - make_interval(secs => (%(n)s - i) / 100.0),
  'ok', 200, '', 3, 3, 0, 0, '[]'::jsonb, ''::bytea, ''::bytea, 200, ''::bytea, false, 'c-' || i
FROM generate_series(0::bigint, %(n)s - 1) AS i;
ANALYZE extproxy_call;
"""


def rows_read(plan: dict) -> int:
    """Rows every scan of the plan read: the ones it kept and the ones its filter removed."""
    own = plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0) if "Scan" in plan["Node Type"] else 0
    return own + sum(rows_read(child) for child in plan.get("Plans", []))


def test_a_backend_whose_calls_are_all_old_is_listed_without_reading_the_newer_calls(transactional_db):
    from django.contrib.auth.models import User
    from django.db import connection
    from rest_framework.test import APIClient

    with connection.cursor() as cursor:
        cursor.execute(FILL, {"n": NEWER + OLD, "old": OLD})
    api = APIClient()
    api.force_authenticate(User.objects.create_superuser("root", "", "pw"))
    pages: list[tuple[str, tuple]] = []

    def watched(execute, sql, params, many, context):
        if "\"extproxy_call\".\"id\" DESC" in sql:  # the page (newest first), not the probes before it
            pages.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watched):
        answer = api.get("/api/calls/?backend=solo").json()
    assert len(answer["results"]) == 50 and {c["backend"] for c in answer["results"]} == {"solo"}
    assert len(pages) == 1, pages
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + pages[0][0], pages[0][1])
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    assert rows_read(plan[0]["Plan"]) <= 2 * OLD, json.dumps(plan, indent=1)
