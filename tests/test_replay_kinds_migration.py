"""Migration 0017 enters the kinds of the replay items stored before it in the run's kind index,
and the calls those runs could not replay: without it their run pages listed none of them by
kind (nor their errors) while the run's counts said how many there were."""
from __future__ import annotations

import pytest

from tests.test_replay_cancel_migration import migrate

BEFORE = [("extproxy", "0016_spool_report")]
AFTER = [("extproxy", "0017_replay_item_kinds")]


@pytest.fixture
def old_schema(transactional_db):
    apps = migrate(BEFORE)
    yield apps
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_items_stored_before_the_kind_index_are_listed_by_kind(old_schema):
    OldRun, OldItem = old_schema.get_model("extproxy", "ReplayRun"), old_schema.get_model("extproxy", "ReplayItem")
    run = OldRun.objects.create(status="done", total=1205, done=1205, changed=1200, errors=3, skipped=2,
                                counts={"passed->failed": 1200, "score": 400})
    OldItem.objects.bulk_create(
        [OldItem(run=run, changed=True, kinds=["passed->failed"] + (["score"] if i % 3 == 0 else [])) for i in range(1200)]
        + [OldItem(run=run, error="backend 'zone' is not in the target") for _ in range(3)]
        + [OldItem(run=run, error="bind is not replayed unless allowed (it would bind the pod)") for _ in range(2)])

    migrate(AFTER)
    from django.contrib.auth.models import Group, User
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from tests.test_replay_kind_totals import api_listing

    user = User.objects.create_user("dev", password="pw")
    user.groups.add(Group.objects.get(name="developer"))
    api = APIClient(HTTP_AUTHORIZATION="Token " + Token.objects.create(user=user).key)
    for query, expected in (("kind=passed-%3Efailed", 1200), ("kind=score", 400), ("errors=1", 3)):
        total, listed = api_listing(api, run.pk, query)
        assert total == len(listed) == expected, query
