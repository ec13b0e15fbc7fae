"""A run's total and its done count the same selection: the one that stood at its start
(replay/paging.py). The total was counted before the selection's upper id was taken, so a
call recorded in between (here while the run builds its target) was replayed but not counted:
a finished run showed done 4 of total 3. Real backend on loopback, real proxy, real database."""
from __future__ import annotations

from extproxy.models import ReplayRun
from extproxy.replay import runner
from tests.conftest import fixture_bytes
from tests.test_per_backend import post
from tests.test_replay import NAMES, gpu_with_filters


def test_a_call_recorded_as_the_run_starts_is_in_neither_its_total_nor_its_done(
        backend_server, proxy, write_config, monkeypatch):
    _, _, server = gpu_with_filters(backend_server, proxy, write_config, 3)
    built = runner.Replayer

    def recorded_meanwhile(*args, **kwargs):
        post(server, "/extender/gpu/filter", fixture_bytes(NAMES))  # traffic goes on as the run starts
        server.flush()
        return built(*args, **kwargs)

    monkeypatch.setattr(runner, "Replayer", recorded_meanwhile)
    run = ReplayRun.objects.create(selector={"filters": {}}, target={"kind": "configured"})

    runner.run_replay(run)

    run.refresh_from_db()
    assert (run.status, run.errors) == ("done", 0), run.error
    assert (run.done, run.total) == (3, 3)
