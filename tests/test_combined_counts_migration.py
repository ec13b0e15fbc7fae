"""Migration 0014 reads a combined filter call's counts again from its stored decisions, the
combined answer's alone (stored before it, they were the sum over the answer and every part),
and drops the score-out-of-range findings of a combined prioritize call's own answer."""
from __future__ import annotations

import json
import zlib

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = [("extproxy", "0013_part_backend_call")]
AFTER = [("extproxy", "0014_combined_answer_only")]


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


def decisions(*triples) -> bytes:
    """A stored decisions blob, as the recorder writes it, from (backend, node, result)."""
    return zlib.compress(json.dumps([
        {"node": node, "backend": backend, "result": result, "reason": None if result in ("passed", "scored") else "no",
         "score": None, "weighted_score": None} for backend, node, result in triples]).encode())


def test_old_combined_filter_counts_are_read_again_from_the_answer(transactional_db):
    apps = migrate(BEFORE)
    try:
        Call = apps.get_model("extproxy", "Call")
        now = timezone.now()

        def call(**fields):
            fields = {"outcome": "ok", **fields}
            return Call.objects.create(started_at=now, finished_at=now, node_count=2,
                                       request_body=b"", response_body=b"", **fields).pk

        # gpu passed both nodes, zone rejected both: the answer left none; stored as 2 passed.
        stuck = call(verb="filter", backend="combined", form="combined", passed_count=2, failed_count=4,
                     decisions_blob=decisions(("combined", "a", "failed"), ("combined", "b", "unresolvable"),
                                              ("gpu", "a", "passed"), ("gpu", "b", "passed"),
                                              ("zone", "a", "failed"), ("zone", "b", "unresolvable")),
                     unresolvable_count=2)
        # The answer was an error (no decisions of its own); gpu's part passed one node.
        failed = call(verb="filter", backend="combined", form="combined", outcome="error", passed_count=1,
                      decisions_blob=decisions(("gpu", "a", "passed"), ("gpu", "b", "failed")), failed_count=1)
        many = [call(verb="filter", backend="combined", form="combined", passed_count=2,
                     decisions_blob=decisions(("combined", "a", "passed"), ("gpu", "a", "passed")))
                for _ in range(3)]  # more than one chunk's worth is read in order: all of them
        # Not combined filters: left as they are.
        single = call(verb="filter", backend="gpu", passed_count=2,
                      decisions_blob=decisions(("gpu", "a", "passed"), ("gpu", "b", "passed")))
        range_finding = {"kind": "score-out-of-range", "detail": "'a' scored 26, outside 0..10; not clamped"}
        other_finding = {"kind": "name-not-in-input", "detail": "score for 'z', not in the input: ignored"}
        scored = call(verb="prioritize", backend="combined", form="combined", passed_count=7,
                      decisions_blob=decisions(("combined", "a", "scored"), ("gpu", "a", "scored")),
                      findings=[range_finding, other_finding, range_finding])
        # A backend's own out-of-range score (per-backend form) is a finding that stays.
        own_range = call(verb="prioritize", backend="gpu", findings=[range_finding],
                         decisions_blob=decisions(("gpu", "a", "scored")))

        import importlib
        module = importlib.import_module("extproxy.migrations.0014_combined_answer_only")
        chunk, module.CHUNK = module.CHUNK, 2
        try:
            apps = migrate(AFTER)
        finally:
            module.CHUNK = chunk
        Call = apps.get_model("extproxy", "Call")

        def counts(pk):
            c = Call.objects.get(pk=pk)
            return c.passed_count, c.failed_count, c.unresolvable_count

        assert counts(stuck) == (0, 1, 1)
        assert counts(failed) == (0, 0, 0)
        assert [counts(pk) for pk in many] == [(1, 0, 0)] * 3
        assert counts(single) == (2, 0, 0)
        assert counts(scored) == (7, 0, 0)
        assert Call.objects.get(pk=scored).findings == [other_finding]
        assert Call.objects.get(pk=own_range).findings == [range_finding]
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
