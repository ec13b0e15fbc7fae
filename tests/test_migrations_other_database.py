"""Migrations' data steps act on the database being migrated, not on `default`.

`migrate --database X` (bench/pages.py migrates two PostgreSQL databases side by side, an
operator may migrate a copy) ran 0002's, 0006's and 0007's data steps through `default`: on
PostgreSQL, when `default` was the database being migrated, 0006's query waited for that
migration's own lock on the table, for good; otherwise the steps changed the wrong database.
Here a second database is migrated from nothing, with rows put in at each step's state.
"""
from __future__ import annotations

import uuid

import pytest
from django.db import connections
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

ALIAS = "migrated"


@pytest.fixture(scope="module", autouse=True)
def other_database(tmp_path_factory):
    """A second, empty database on the test database's server (a file for SQLite), registered
    before the test's database access is set up (module scope), so the test may use it."""
    settings = dict(connections["default"].settings_dict)
    name = f"extproxy_migrated_{uuid.uuid4().hex[:10]}"
    if settings["ENGINE"].endswith("postgresql"):
        import psycopg

        with psycopg.connect(host=settings["HOST"], port=settings["PORT"] or 5432, user=settings["USER"],
                             password=settings["PASSWORD"], dbname="postgres", autocommit=True) as pg:
            pg.execute(f'CREATE DATABASE "{name}"')
        settings["NAME"] = name
    else:
        settings["NAME"] = str(tmp_path_factory.mktemp("migrated") / f"{name}.sqlite3")
    settings["TEST"] = dict(settings["TEST"], NAME=settings["NAME"])
    connections.settings[ALIAS] = settings
    try:
        yield
    finally:
        connections[ALIAS].close()
        del connections[ALIAS]
        del connections.settings[ALIAS]
        if settings["ENGINE"].endswith("postgresql"):
            with psycopg.connect(host=settings["HOST"], port=settings["PORT"] or 5432, user=settings["USER"],
                                 password=settings["PASSWORD"], dbname="postgres", autocommit=True) as pg:
                pg.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrate_to(target: list[tuple[str, str]]):
    executor = MigrationExecutor(connections[ALIAS])
    executor.loader.build_graph()
    executor.migrate(target or executor.loader.graph.leaf_nodes())
    return executor.loader.project_state(target or executor.loader.graph.leaf_nodes()).apps


@pytest.mark.django_db(transaction=True, databases=["default", ALIAS])
def test_data_steps_change_the_database_being_migrated():
    executor = MigrationExecutor(connections[ALIAS])
    apps = migrate_to([("extproxy", "0001_initial"), *executor.loader.graph.leaf_nodes("auth")])
    apps.get_model("auth", "Group").objects.using(ALIAS).create(name="operators")  # an earlier release's group

    apps = migrate_to([("extproxy", "0005_replay")])
    now = timezone.now()
    old_call = apps.get_model("extproxy", "Call")
    kept = [old_call.objects.using(ALIAS).create(verb="filter", backend="b", started_at=now, finished_at=now,
                                                 outcome="ok", request_body=b"", response_body=b"", decisions_blob=b"").pk
            for _ in range(3)]

    apps = migrate_to([("extproxy", "0006_call_id")])
    calls = apps.get_model("extproxy", "Call").objects.using(ALIAS)
    call_ids = dict(calls.values_list("pk", "call_id"))
    assert sorted(call_ids) == sorted(kept) and all(call_ids.values()) and len(set(call_ids.values())) == 3
    node = apps.get_model("extproxy", "CallNode")
    node.objects.using(ALIAS).bulk_create([node(call_id=pk, node="node-01", result="passed") for pk in kept])

    apps = migrate_to([])  # to the latest
    calls = apps.get_model("extproxy", "Call").objects.using(ALIAS)
    sets = set(calls.values_list("node_set_id", flat=True))
    assert len(sets) == 1 and None not in sets  # the three calls' pairs moved into one shared set
    groups = set(apps.get_model("auth", "Group").objects.using(ALIAS).values_list("name", flat=True))
    assert "viewer" in groups and "operators" not in groups
