"""A run's rate spaces out the calls it sends. A bind it does not replay (no allow_bind) sends
nothing, yet each took a turn of the rate: a day's selection, binds and all, at a slow rate
spent a quarter of its hours waiting before calls it then skipped, holding the process's one
replay worker. The run's waits are watched where the runner asks for them (replay/cancel.py's
check_cancelled, which sleeps them); real backend on loopback, real database."""
from __future__ import annotations

from extproxy.models import ReplayRun
from extproxy.replay import runner
from tests.conftest import fixture_bytes, pass_all, reply
from tests.test_per_backend import config_for, post
from tests.test_replay import CAPTURED, NAMES


def test_binds_that_are_not_replayed_do_not_wait_for_the_rate(backend_server, proxy, write_config, monkeypatch):
    backend = backend_server({"filter": pass_all, "bind": reply(200, b'{"Error":""}')})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    bind = fixture_bytes(CAPTURED + "bind-request.nodecache-false.json")
    for _ in range(3):
        post(server, "/extender/gpu/bind", bind)
    post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    server.flush()
    waits: list[float] = []

    def watched(run, wait: float = 0.0) -> None:
        if wait:
            waits.append(wait)  # not slept: the test counts the waits, not the time

    monkeypatch.setattr(runner, "check_cancelled", watched)
    run = ReplayRun.objects.create(selector={"filters": {}}, target={"kind": "configured"}, rate=0.5)

    runner.run_replay(run)

    run.refresh_from_db()
    assert (run.status, run.done, run.skipped, run.errors) == ("done", 4, 3, 0)
    assert waits == []  # the binds took no turn, so the filter's is the run's first
