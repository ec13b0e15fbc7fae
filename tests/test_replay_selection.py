"""Replay selections and inputs that must be refused with a reason, through the real API,
dashboard and command: a selection of no call, a malformed fixture file, odd form digits,
query flags."""
from __future__ import annotations

import pytest

from extproxy.models import ReplayRun
from tests.conftest import fixture_bytes, pass_all
from tests.test_per_backend import config_for, post
from tests.test_replay import NAMES, recorded, user_client
from tests.test_replay_command import replay
from tests.test_replay_pages import logged_in


@pytest.fixture
def one_filter(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"filter": pass_all})
    path = write_config(config_for(backend.url, nodeCacheCapable=True))
    server = proxy(path)
    post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    [call] = recorded(server, admin_client)
    return server, path, call


def test_a_selection_of_no_call_is_refused_not_reported_as_unchanged(one_filter):
    server, path, call = one_filter
    developer = user_client("developer")
    missing = call["id"] + 424242

    gone = developer.post(server.url + "/api/replays/", json={"call": missing, "wait": True})
    assert gone.status_code == 404 and f"no recorded call {missing}" in gone.text
    none = developer.post(server.url + "/api/replays/", json={"calls": [missing, missing + 1]})
    assert none.status_code == 400 and "matches no recorded call" in none.json()["calls"]
    empty = developer.post(server.url + "/api/replays/", json={"filters": {"namespace": "nowhere"}})
    assert empty.status_code == 400 and "filters" in empty.json()
    assert ReplayRun.objects.count() == 0
    page = logged_in("developer").post("/replays/", {"call": missing, "target_kind": "configured"})
    assert page.status_code == 400 and f"no recorded call {missing}" in page.content.decode()

    code, out, err = replay("--config", path, "--call", str(missing), "--no-record")
    assert code == 2 and "no call was replayed" in err, out + err
    code, _, err = replay("--config", path, "--call", str(missing))
    assert code == 2, err
    assert replay("--config", path, "--call", str(call["id"]), "--no-record")[0] == 0  # still fine when found
