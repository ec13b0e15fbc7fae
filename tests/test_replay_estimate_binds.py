"""The API refuses a run that would take more than 6 h at the rate it asks for. Its estimate
counted the binds of the selection, which a run without allow_bind skips without a turn of the
rate: a bind-heavy selection at a slow rate was refused though it would finish at once. Real
backend on loopback, real proxy serving the API, real database."""
from __future__ import annotations

from tests.conftest import fixture_bytes, pass_all, reply
from tests.test_per_backend import config_for, post
from tests.test_replay import CAPTURED, NAMES, developer, wait_for  # noqa: F401 (developer: a fixture)

# 4 calls at this rate take 40,000 s (over 6 h); the one filter among them 10,000 s.
RATE = 0.0001


def test_binds_that_will_not_be_replayed_are_not_in_the_runs_estimate(backend_server, proxy, write_config, developer):
    backend = backend_server({"filter": pass_all, "bind": reply(200, b'{"Error":""}')})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    for _ in range(3):
        post(server, "/extender/gpu/bind", fixture_bytes(CAPTURED + "bind-request.nodecache-false.json"))
    post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    server.flush()

    refused = developer.post(server.url + "/api/replays/", json={"filters": {}, "rate": RATE, "allow_bind": True})
    assert refused.status_code == 400, refused.text
    assert "4 calls at 0.0001/s would take more than 6 h" in refused.json()["rate"], refused.text

    started = developer.post(server.url + "/api/replays/", json={"filters": {}, "rate": RATE})
    assert started.status_code == 201, started.text
    run = wait_for(developer, server, started.json()["id"])
    assert (run["status"], run["total"], run["done"], run["skipped"], run["errors"]) == ("done", 4, 4, 3, 0), run
