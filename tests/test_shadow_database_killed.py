"""A database error in the shadow process's worker thread (other than the deadline) is counted
as an `error` for that call; the thread's broken connection was then kept, so every later
Node object read on that thread failed too, and a names-only call was never mirrored again
until the process restarted. Now the thread's connection is closed and the next call opens a
fresh one. The real shadow process and a real PostgreSQL whose server process for that
connection is ended (pg_terminate_backend) from another connection."""
from __future__ import annotations

import os

import pytest

from tests.conftest import pass_all
from tests.test_database_hung import relay_to_database
from tests.test_database_keepalive import wait_for, write_calls
from tests.test_recorder import drain
from tests.test_shadow import with_shadow
from tests.test_shadow_database_hung import ShadowProcess, full_call, names_only_call

pytestmark = [
    pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                       reason="PostgreSQL only (DATABASE_URL)"),
    pytest.mark.timeout(240),
]


def end_node_readers() -> int:
    """End the server processes of every other connection whose last statement read Node
    objects (the shadow's worker thread's): their clients see the connection broken."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() "
                       "and pid <> pg_backend_pid() and query like '%%extproxy_nodeobject%%'")
        return len(cursor.fetchall())


def test_after_its_database_connection_is_ended_the_next_call_is_mirrored(transactional_db, tmp_path, backend_server):
    write_calls(tmp_path / "recorded" / "spool", full_call())
    drain(tmp_path / "recorded")  # the calls' Node objects are stored: a names-only call can be sent in full
    shadow_backend = backend_server({"filter": pass_all})
    relay = relay_to_database()  # it only passes bytes on here
    spool = tmp_path / "spool"
    process = ShadowProcess(spool, with_shadow("http://127.0.0.1:9", shadow_backend.url, nodeCacheCapable=False),
                            relay)
    try:
        write_calls(spool, names_only_call())
        wait_for(lambda: process.figures().get("calls") == 1, 90)  # read on the worker thread's connection
        assert end_node_readers() == 1
        write_calls(spool, names_only_call())  # its read meets the ended connection: an error
        wait_for(lambda: process.figures().get("errors") == 1, 90)
        write_calls(spool, names_only_call())  # a fresh connection: mirrored
        wait_for(lambda: process.figures().get("calls") == 2 or process.figures().get("errors") == 2, 90)
        assert (process.figures()["calls"], process.figures()["errors"]) == (2, 1), process.output()
    finally:
        process.stop()
        relay.close()
