"""The backends page's contract findings come from the newest calls only (backend_stats: the newest
4,000), whatever the table's size. Asked as a subquery of those ids, PostgreSQL took the calls with
findings for rare, read the whole table for them and then kept the ones among the newest: at
250,000 calls a seq scan of every row, the page's slowest query. The page's own query, read with
EXPLAIN ANALYZE on a real PostgreSQL: the rows it reads are counted, not timed."""
from __future__ import annotations

import json
import os

import pytest
from django.db import connection

from tests.test_error_filter_reads_errors_only import CALLS, fill

pytestmark = pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                                reason="PostgreSQL only (DATABASE_URL): its planner's choice")

RECENT = 4 * 1000  # backend_findings(scan=1000) reads the newest scan * 4 calls


def rows_read(plan: dict) -> int:
    """Rows every scan of the plan read, over all its loops (a parallel scan's workers included)."""
    own = 0
    if "Scan" in plan["Node Type"]:
        own = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)) * plan.get("Actual Loops", 1)
    return own + sum(rows_read(child) for child in plan.get("Plans", []))


def test_findings_of_the_newest_calls_are_read_from_the_newest_calls_only(transactional_db):
    from extproxy.models import Call
    from dashboard.backend_stats import backend_findings

    fill()
    finding = [{"kind": "unknown-node", "detail": "node-99 was not in the request"}]
    newest = list(Call.objects.order_by("-started_at", "-id").values_list("id", flat=True)[:RECENT])
    Call.objects.filter(id__in=newest[::500]).update(findings=finding)  # 8 among the newest
    Call.objects.filter(id__lte=10).exclude(outcome="error").update(findings=finding)  # old ones, past the newest 4,000
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE extproxy_call")
    statements: list[tuple[str, tuple]] = []

    def watched(execute, sql, params, many, context):
        if 'FROM "extproxy_call"' in sql and 'NOT ("extproxy_call"."findings" =' in sql:
            statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watched):
        found = backend_findings()
    unknown = {f["kind"]: f for f in found["gpu"]}["unknown-node"]
    assert unknown["count"] == 8  # the newest calls' only: the old ones are past the scan
    assert len(statements) == 1, statements
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statements[0][0], statements[0][1])
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    assert rows_read(plan[0]["Plan"]) <= 2 * RECENT < CALLS, json.dumps(plan, indent=1)
