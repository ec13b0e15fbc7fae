"""manage.py replay as a CI gate against a build that is down: the changed call's line says why
(the error the target's absence gave), in the table and in --json, not only `outcome:ok->error`."""
from __future__ import annotations

import json

from tests.conftest import fixture_bytes, pass_all
from tests.test_per_backend import config_for, post
from tests.test_replay import FULL, recorded
from tests.test_replay_command import replay


def test_the_gate_says_why_a_call_went_to_error(backend_server, proxy, write_config, admin_client):
    gpu = backend_server({"filter": pass_all})
    path = write_config(config_for(gpu.url))
    server = proxy(path)
    post(server, "/extender/gpu/filter", fixture_bytes(FULL))
    [call] = recorded(server, admin_client)
    down = "http://127.0.0.1:9/scheduler"  # nothing listens on port 9

    code, out, _ = replay("--call", str(call["id"]), "--config", str(path), "--url", down)

    assert code == 1
    assert f"changed: call {call['id']} (filter gpu): outcome:ok->error x1" in out
    assert "Errno 111" in out  # ECONNREFUSED: the cause, under the call

    code, out, _ = replay("--call", str(call["id"]), "--config", str(path), "--url", down, "--json")
    [changed] = json.loads(out)["changed_calls"]
    assert code == 1 and changed["error"]["before"] == "" and "Errno 111" in changed["error"]["after"]
