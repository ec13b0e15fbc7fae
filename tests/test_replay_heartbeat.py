"""A run carried out outside the worker (manage.py replay, the API's wait) keeps a heartbeat:
a live server's watcher must not take it, still running, for a dead process's run."""
from __future__ import annotations

import threading
import time

from extproxy.models import ReplayRun
from tests.conftest import fixture_bytes, pass_all, slow
from tests.test_per_backend import config_for, post
from tests.test_replay import NAMES, recorded, user_client
from tests.test_replay_command import replay


def test_command_and_wait_runs_are_not_failed_by_a_live_watcher(backend_server, proxy, write_config, admin_client,
                                                                settings):
    settings.EXTPROXY_REPLAY_STALE_SECONDS = 1.0  # 60 in production: the same happened after a minute
    backend = backend_server({"filter": pass_all})
    path = write_config(config_for(backend.url, nodeCacheCapable=True))
    server = proxy(path)  # its lifespan starts the watcher
    for _ in range(6):
        post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    calls = recorded(server, admin_client)
    backend.httpd.behaviours["filter"] = slow(0.6, pass_all)  # the command's run takes 3.6 s, 3 stale periods
    seen: set[str] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.update(ReplayRun.objects.values_list("status", flat=True))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        code, out, err = replay("--config", path, "--verb", "filter")
        backend.httpd.behaviours["filter"] = slow(3.0, pass_all)
        waited = user_client("developer").post(server.url + "/api/replays/", json={"call": calls[0]["id"], "wait": True},
                                               timeout=60).json()
    finally:
        stop.set()
        watcher.join()
    assert code == 0, out + err
    assert waited["status"] == "done" and waited["error"] == "", waited
    assert "failed" not in seen and list(ReplayRun.objects.values_list("status", "error")) == [("done", "")] * 2
