"""The shadow process reads Node objects from the database when it sends a names-only call to a
full-object shadow. Facing a database alive at the TCP level that never answers, that read
waited for ever: the call never finished, the figures (applied in spool order) stopped, and once
every call in flight was held so, the process with them. Now the read has the recorder's
deadline (EXTPROXY_DB_STATEMENT_DEADLINE): past it the call is dropped (`database-deadline`),
logged, and the process goes on. The real shadow process behind tests/tcprelay.py; PostgreSQL
only, as tests/test_database_hung.py."""
from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import quote

import pytest

from extproxy.shadowstats import read_state_file
from tests.conftest import LoggedProcess, fixture_bytes, pass_all
from tests.tcprelay import FreezableRelay
from tests.test_database_hung import relay_to_database
from tests.test_database_keepalive import wait_for, write_calls
from tests.test_recorder import make_trace
from tests.test_shadow import with_shadow

pytestmark = [
    pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                       reason="PostgreSQL only (DATABASE_URL)"),
    pytest.mark.timeout(240),
]

NODE_QUERY = b'FROM "extproxy_nodeobject"'  # replay/modes.node_objects_by_name's read


class ShadowProcess(LoggedProcess):
    """`manage.py shadow` following `spool`, its database through `relay`."""

    def __init__(self, spool: Path, config: dict, relay: FreezableRelay, deadline: str = "3") -> None:
        from django.db import connection

        db = connection.settings_dict
        credentials = quote(db["USER"]) + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
        config_path = spool.parent / "config.json"
        config_path.write_text(json.dumps(config))
        spool.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, EXTPROXY_SPOOL_DIR=str(spool), EXTPROXY_CONFIG=str(config_path),
                   DATABASE_URL=f"postgresql://{credentials}@127.0.0.1:{relay.port}/{quote(db['NAME'])}",
                   EXTPROXY_DB_STATEMENT_DEADLINE=deadline, EXTPROXY_DB_CONNECT_TIMEOUT="2")
        self._start(["shadow", "--nice", "0", "--no-idle-class"], env, spool.parent / "shadow.log")
        self.spool = spool
        wait_for(lambda: read_state_file(spool).get("pid") == self.process.pid, 60)  # its first save: it follows

    def figures(self) -> dict:
        return read_state_file(self.spool).get("shadows", {}).get("gpu-next", {})


def names_only_call():
    return make_trace()  # the names-only filter: a full-object shadow needs its Node objects read


def full_call():
    return make_trace(body=fixture_bytes("filter-request.nodecache-false.json"),
                      response=fixture_bytes("filter-result.nodecache-false.json"), node_cache_capable=False)


def test_a_shadow_process_whose_database_never_answers_drops_that_call_and_goes_on(
        transactional_db, tmp_path, backend_server):
    shadow_backend = backend_server({"filter": pass_all})
    relay = relay_to_database()
    relay.swallow_after(NODE_QUERY)  # every Node object read is taken and never answered
    spool = tmp_path / "spool"
    process = ShadowProcess(spool, with_shadow("http://127.0.0.1:9", shadow_backend.url, nodeCacheCapable=False),
                            relay)
    try:
        write_calls(spool, names_only_call())
        wait_for(lambda: process.figures().get("dropped", {}).get("database-deadline") == 1, 90)
        assert relay.swallowed_bytes > 0  # it was the database's silence
        assert "not mirrored" in process.output() and "EXTPROXY_DB_STATEMENT_DEADLINE" in process.output()
        write_calls(spool, full_call(), names_only_call())  # it goes on: one needs no read, one fails again
        wait_for(lambda: process.figures().get("dropped", {}).get("database-deadline") == 2
                 and process.figures().get("calls") == 1, 90)
        relay.relay_again()  # the database answers again: the read, on a new connection, answers too
        write_calls(spool, names_only_call())  # no Node object of its names is stored: an error, answered
        wait_for(lambda: process.figures().get("errors") == 1, 90)
        assert process.figures()["dropped"]["database-deadline"] == 2
        assert process.process.poll() is None
    finally:
        process.stop()
        relay.close()


def test_a_sigterm_while_a_read_hangs_ends_the_shadow_process_at_once(transactional_db, tmp_path, backend_server):
    """With a deadline of 300 s, a SIGTERM during a read the database never answers waited it out,
    past the pod's grace period, into kubelet's SIGKILL: the stop now gives the read up at once."""
    shadow_backend = backend_server({"filter": pass_all})
    relay = relay_to_database()
    relay.swallow_after(NODE_QUERY)
    spool = tmp_path / "spool"
    process = ShadowProcess(spool, with_shadow("http://127.0.0.1:9", shadow_backend.url, nodeCacheCapable=False),
                            relay, deadline="300")
    try:
        write_calls(spool, names_only_call())
        wait_for(lambda: relay.swallowed_bytes > 0, 60)  # the read is in flight, and will get no answer
        process.process.terminate()
        assert process.process.wait(60) == 0, process.output()  # not 300 s and more
        assert "shadow: stopped" in process.output()
    finally:
        process.stop()
        relay.close()
