"""The node index (models.CallNode): which calls involved a node, with each verdict given it.

`index_calls` is called by the recorder inside the batch's transaction, after the Call rows
have their keys. One multi-row insert per batch through the cursor: a 5000-node call costs
one tuple per node, not one ORM object. Off with EXTPROXY_NODE_INDEX=0 (what it costs the
writer is in the README). This module must not decide verdicts: it stores the decisions the
recorder built.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db import connection

from .semantics import Decision

CHUNK = 5000


def rows_for(call_pk: int, decisions: Sequence[Decision], nodes: Iterable[str]) -> list[tuple[int, str, str]]:
    """One row per distinct (node, result); request nodes with no decision get result ""."""
    seen: set[tuple[str, str]] = set()
    judged: set[str] = set()
    for d in decisions:
        if d.node:
            seen.add((d.node[:253], d.result.value))
            judged.add(d.node)
    for node in nodes:
        if node and node not in judged:
            seen.add((str(node)[:253], ""))
    return [(call_pk, node, result) for node, result in seen]


def index_calls(entries: Iterable[tuple[int, Sequence[Decision], Iterable[str]]]) -> int:
    """Insert the index rows of (call pk, decisions, request node names) entries; returns rows."""
    from django.conf import settings

    from .models import CallNode

    if not settings.EXTPROXY_NODE_INDEX:
        return 0
    table = connection.ops.quote_name(CallNode._meta.db_table)
    sql = f"INSERT INTO {table} (call_id, node, result) VALUES (%s, %s, %s)"
    rows: list[tuple[int, str, str]] = []
    total = 0
    with connection.cursor() as cursor:
        for call_pk, decisions, nodes in entries:
            rows += rows_for(call_pk, decisions, nodes)
            if len(rows) >= CHUNK:
                cursor.executemany(sql, rows)
                total, rows = total + len(rows), []
        if rows:
            cursor.executemany(sql, rows)
            total += len(rows)
    return total
