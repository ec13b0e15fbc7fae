"""Migration 0007 moves the node index's old rows (one CallNode per call and pair) into node
sets, so the `node=` filter answers the same for calls recorded before it."""
from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = [("extproxy", "0006_call_id")]
AFTER = [("extproxy", "0007_node_sets")]


@pytest.fixture
def old_schema(transactional_db):
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    yield executor.loader.project_state(BEFORE).apps
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_it_moves_each_calls_pairs_into_a_shared_set(old_schema):
    from extproxy.nodeindex import digest_of

    OldCall, CallNode = old_schema.get_model("extproxy", "Call"), old_schema.get_model("extproxy", "CallNode")
    now = timezone.now()
    pairs = {
        "a": [("node-01", "passed"), ("node-02", "failed")],
        "b": [("node-01", "passed"), ("node-02", "failed")],  # the same set as a
        "c": [("node-01", "")],
        "d": [],  # no node: no set
    }
    made = {}
    for name, rows in pairs.items():
        call = OldCall.objects.create(call_id=f"call-{name}", verb="filter", backend="b", started_at=now,
                                      finished_at=now, outcome="ok", request_body=b"", response_body=b"",
                                      decisions_blob=b"")
        CallNode.objects.bulk_create([CallNode(call=call, node=n, result=r) for n, r in rows])
        made[name] = call.pk

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    apps = executor.loader.project_state(AFTER).apps
    NewCall, NewSet = apps.get_model("extproxy", "Call"), apps.get_model("extproxy", "NodeSet")
    Entry = apps.get_model("extproxy", "NodeSetEntry")

    sets = dict(NewCall.objects.values_list("pk", "node_set_id"))
    assert sets[made["a"]] == sets[made["b"]] != sets[made["c"]]
    assert sets[made["d"]] is None
    assert NewSet.objects.count() == 2
    assert NewSet.objects.get(pk=sets[made["a"]]).digest == digest_of(pairs["a"])  # as the recorder makes it
    assert sorted(Entry.objects.filter(node_set_id=sets[made["a"]]).values_list("node", "result")) == pairs["a"]
    assert list(Entry.objects.filter(node_set_id=sets[made["c"]]).values_list("node", "result")) == pairs["c"]
