"""Migration 0012 moves a replay's cancel out of its `error` text ("cancelled by <who>") into
its own fields, so that runs cancelled before it read as cancelled as new ones do."""
from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = [("extproxy", "0011_call_replay_newest")]
AFTER = [("extproxy", "0012_replay_cancel_fields")]


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


@pytest.fixture
def old_schema(transactional_db):
    apps = migrate(BEFORE)
    yield apps
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_runs_cancelled_the_old_way_read_as_cancelled(old_schema):
    OldRun = old_schema.get_model("extproxy", "ReplayRun")
    ended = timezone.now()
    old = {
        "running": OldRun.objects.create(status="failed", error="cancelled by dev-1", finished_at=ended),
        "queued": OldRun.objects.create(status="failed", error="cancelled by dev-2"),  # no end recorded
        "late": OldRun.objects.create(status="done", finished_at=ended,
                                      error="cancelled by ops (asked after the last call: the run had finished)"),
        "own": OldRun.objects.create(status="failed", error="RuntimeError: boom", finished_at=ended),
    }

    migrate(AFTER)
    from extproxy.models import ReplayRun

    runs = {name: ReplayRun.objects.get(pk=run.pk) for name, run in old.items()}
    assert [(r.cancel_requested_by, r.error) for r in runs.values()] == [
        ("dev-1", ""), ("dev-2", ""), ("ops", ""), ("", "RuntimeError: boom")]
    assert runs["running"].cancel_requested_at == ended
    assert runs["queued"].cancel_requested_at == runs["queued"].created_at
    assert runs["own"].cancel_requested_at is None
    assert runs["running"].cancel_note == "cancelled by dev-1"
    assert runs["late"].cancel_note == "cancelled by ops (asked after the last call: the run had finished)"

    apps = migrate(BEFORE)  # and back: the text again, for the code before it
    OldRun = apps.get_model("extproxy", "ReplayRun")
    assert OldRun.objects.get(pk=old["late"].pk).error == "cancelled by ops (asked after the last call: the run had finished)"
    assert OldRun.objects.get(pk=old["queued"].pk).error == "cancelled by dev-2"
    assert OldRun.objects.get(pk=old["own"].pk).error == "RuntimeError: boom"
