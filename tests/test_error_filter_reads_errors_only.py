"""`error=...` reads the calls and parts that have an error, not every call. Asked of each call
(its error's text, or a part's, per call walked newest first), a text that few or no calls held
walked the whole table: on PostgreSQL 190 ms a listing page at 250,000 calls, seconds with real
rows on a loaded machine, and the same for the live feed, its attempts and the auditors' export.
The API's own query, read with EXPLAIN: on PostgreSQL the rows it reads are counted (not timed),
on SQLite the plan must take both partial indexes and scan no table whole."""
from __future__ import annotations

import json

from django.db import connection

from tests.test_backend_filter_old_calls import rows_read

CALLS, OWN_ERRORS, PART_ERRORS = 20_000, 40, 30

FILL = """
INSERT INTO extproxy_call (verb, backend, form, pod_namespace, pod_name, pod_uid, attempt, started_at,
  finished_at, outcome, http_status, error, node_count, passed_count, failed_count, unresolvable_count,
  findings, request_body, response_body, response_status, decisions_blob, is_replay, call_id)
SELECT 'filter', CASE WHEN i %% 2 = 0 THEN 'combined' ELSE 'gpu' END,
  CASE WHEN i %% 2 = 0 THEN 'combined' ELSE 'per-backend' END, 'default', 'pod-' || i, 'uid-' || i, '',
  {moment}, {moment}, CASE WHEN i %% 500 = 1 THEN 'error' ELSE 'ok' END, 200,
  CASE WHEN i %% 500 = 1 THEN 'gpu: HTTP 500 disk quota exceeded' ELSE '' END,
  3, 3, 0, 0, '[]', {empty}, {empty}, 200, {empty}, {false}, 'c-' || i
FROM {series};
INSERT INTO extproxy_backendcall (call_id, backend, verb, started_at, finished_at, outcome, http_status, error,
  findings, request_body, response_body, decisions_blob)
SELECT id, 'slow', 'filter', started_at, finished_at, CASE WHEN CAST(SUBSTR(pod_name, 5) AS INTEGER) %% 670 = 0 THEN 'error' ELSE 'ok' END, 200,
  CASE WHEN CAST(SUBSTR(pod_name, 5) AS INTEGER) %% 670 = 0 THEN 'slow: quota exceeded, ignorable' ELSE '' END, '[]', {empty}, {empty}, {empty}
FROM extproxy_call WHERE form = 'combined';
"""

POSTGRES = {"moment": "now() - make_interval(secs => (%(n)s - i) / 100.0)", "empty": "''::bytea", "false": "false",
            "series": "generate_series(0::bigint, %(n)s - 1) AS i"}
# SQLite: a recursive series, the same rows
SQLITE = {"moment": "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-' || ((%(n)s - i) / 100.0) || ' seconds')",
          "empty": "X''", "false": "0", "series": "(WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s "
          "WHERE i < %(n)s - 1) SELECT i FROM s)"}


def fill() -> None:
    postgres = connection.vendor == "postgresql"
    sql = FILL.format(**(POSTGRES if postgres else SQLITE))
    with connection.cursor() as cursor:
        for statement in filter(str.strip, sql.split(";")):
            cursor.execute(statement, {"n": CALLS})
        cursor.execute("ANALYZE")


def listing_query(api, path: str) -> tuple[list[dict], str, tuple]:
    """The listing's results, and the SQL of its page (newest first; not the probes before it)."""
    pages: list[tuple[str, tuple]] = []

    def watched(execute, sql, params, many, context):
        if "\"extproxy_call\".\"id\" DESC" in sql:
            pages.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watched):
        answer = api.get(path)
    assert answer.status_code == 200, answer.content[:500]
    assert len(pages) == 1, pages
    return answer.json()["results"], pages[0][0], pages[0][1]


def test_an_error_search_reads_the_errors_only(transactional_db):
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    from extproxy.models import BackendCall, Call

    fill()
    own = set(Call.objects.exclude(error="").values_list("id", flat=True))
    parts = set(BackendCall.objects.exclude(error="").values_list("call_id", flat=True))
    assert (len(own), len(parts)) == (OWN_ERRORS, PART_ERRORS)
    api = APIClient()
    api.force_authenticate(User.objects.create_superuser("root", "", "pw"))

    found, _, _ = listing_query(api, "/api/calls/?error=QUOTA+exceeded")
    newest = sorted(own | parts, key=lambda i: -i)[:50]  # started in id order
    assert [c["id"] for c in found] == newest
    assert listing_query(api, "/api/calls/?error=ignorable")[0] and \
        {c["id"] for c in listing_query(api, "/api/calls/?error=ignorable")[0]} == parts

    results, sql, params = listing_query(api, "/api/calls/?error=no+such+words")
    assert results == []
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
            plan = cursor.fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            assert rows_read(plan[0]["Plan"]) <= 2 * (OWN_ERRORS + PART_ERRORS), json.dumps(plan, indent=1)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            steps = [row[-1] for row in cursor.fetchall()]
            assert any("call_with_error" in s for s in steps) and any("part_with_error" in s for s in steps), steps
            # the calls listed are looked up by id, not walked (before: SCAN extproxy_call USING INDEX call_newest)
            assert not [s for s in steps if s.startswith("SCAN") and "_with_error" not in s], steps
