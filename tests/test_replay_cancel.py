"""A replay run can be stopped: POST /api/replays/<id>/cancel/ and the run page's button. The
runner stops between calls, or during its wait for the rate; the worker is free again."""
from __future__ import annotations

import time

from extproxy.models import AuditEvent, ReplayRun
from tests.conftest import fixture_bytes, pass_all
from tests.test_per_backend import config_for, post
from tests.test_replay import NAMES, recorded, user_client, wait_for
from tests.test_replay_pages import logged_in


def test_a_slow_run_is_cancelled_from_the_api_and_the_page_and_frees_the_worker(
    backend_server, proxy, write_config, admin_client
):
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    for _ in range(3):
        post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    recorded(server, admin_client)
    developer = user_client("developer")
    every = {"filters": {"verb": "filter"}}

    slowest = developer.post(server.url + "/api/replays/", json={**every, "rate": 0.0001})
    assert slowest.status_code == 400 and "rate" in slowest.json(), slowest.text  # 3 calls would take 8 h
    started = developer.post(server.url + "/api/replays/", json={**every, "rate": 0.01}).json()  # 200 s
    queued = developer.post(server.url + "/api/replays/", json={**every, "rate": 50}).json()
    deadline = time.monotonic() + 30
    while ReplayRun.objects.get(pk=started["id"]).done < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert developer.get(server.url + f"/api/replays/{started['id']}/cancel/").json()["cancellable"] is True

    began = time.monotonic()
    cancelled = developer.post(server.url + f"/api/replays/{started['id']}/cancel/")
    assert cancelled.status_code == 200, cancelled.text
    run = wait_for(developer, server, started["id"], timeout=10)
    assert time.monotonic() - began < 5  # not the 100 s left of the rate's wait
    assert run["status"] == "failed" and run["done"] == 1 and run["error"] == f"cancelled by {developer.username}"
    assert run["cancel_requested_by"] == developer.username and run["cancel_requested_at"]
    stored = ReplayRun.objects.get(pk=started["id"])
    assert (stored.error, stored.cancel_requested_by) == ("", developer.username)  # a field, not text in error
    assert wait_for(developer, server, queued["id"])["status"] == "done"  # the worker went on
    again = developer.post(server.url + f"/api/replays/{started['id']}/cancel/")
    assert again.status_code == 409 and "has ended" in again.text
    assert AuditEvent.objects.filter(action="replay-cancelled", target=f"replay {started['id']}").count() == 1

    page_run = developer.post(server.url + "/api/replays/", json={**every, "rate": 0.01}).json()
    pages = logged_in("developer")
    assert b'name="cancel"' in pages.get(f"/replays/{page_run['id']}/").content
    assert pages.post(f"/replays/{page_run['id']}/", {"cancel": "1"}).status_code == 302
    assert wait_for(developer, server, page_run["id"], timeout=10)["status"] == "failed"
    assert user_client("viewer").post(server.url + f"/api/replays/{page_run['id']}/cancel/").status_code == 403


def test_a_cancel_asked_after_the_last_call_is_kept_on_the_finished_run(backend_server, transactional_db):
    """The API answered it and audited it: the run's final save must not erase it."""
    from extproxy.replay.cancel import request_cancel
    from extproxy.replay.runner import run_replay
    from tests.test_replay_batch_faults import gpu_config
    from tests.test_replay_scale import record_calls, without_nagle

    backend = backend_server({"filter": without_nagle(pass_all)})
    record_calls(2)
    run = ReplayRun.objects.create(selector={"filters": {"verb": "filter"}}, target={"kind": "configured"}, rate=0)
    seen = []

    def after(result) -> None:
        seen.append(result)
        if len(seen) == 2:  # after the last call's check, before the run's end
            assert request_cancel(run.pk, "ops")

    run_replay(run, config=gpu_config(backend.url), on_result=after)
    run.refresh_from_db()
    assert (run.status, run.done, run.error, run.cancel_requested_by) == ("done", 2, "", "ops")
    assert run.cancel_requested_at is not None
    assert run.cancel_note == "cancelled by ops (asked after the last call: the run had finished)"


def test_the_api_and_the_pages_show_a_cancel_from_its_fields(transactional_db):
    """A cancel written to its fields (not to the run's error) shows in the API, on the run's
    page (and its progress poll) and in the list of runs; a run's own error still shows as its."""
    from extproxy.replay.cancel import request_cancel
    from tests.test_replay import user_client

    queued = ReplayRun.objects.create(selector={"call": 1}, target={"kind": "configured"})
    assert request_cancel(queued.pk, "ops-person")
    assert not request_cancel(queued.pk, "someone-else")  # ended: the first ask stays
    queued.refresh_from_db()
    assert (queued.status, queued.error, queued.cancel_requested_by) == ("failed", "", "ops-person")

    developer = user_client("developer")
    from django.test import Client  # the API through the test client, with the token of a developer

    api = Client(HTTP_AUTHORIZATION=developer.headers["Authorization"])
    run = api.get(f"/api/replays/{queued.pk}/").json()
    assert run["cancel_requested_by"] == "ops-person" and run["cancel_requested_at"].endswith("Z")
    assert run["error"] == "cancelled by ops-person"
    assert api.get(f"/api/replays/{queued.pk}/cancel/").json()["cancellable"] is False

    pages = logged_in("developer")
    assert b"cancelled by ops-person" in pages.get(f"/replays/{queued.pk}/").content
    assert b"cancelled by ops-person" in pages.get(f"/replays/{queued.pk}/", HTTP_HX_REQUEST="true",
                                                   HTTP_HX_TARGET="progress").content
    assert b"(cancelled by ops-person)" in pages.get("/replays/").content

    failed = ReplayRun.objects.create(selector={"call": 1}, target={"kind": "configured"}, status="failed",
                                      error="RuntimeError: boom")
    assert api.get(f"/api/replays/{failed.pk}/").json()["cancel_requested_by"] is None
    assert b"cancelled by" not in pages.get(f"/replays/{failed.pk}/").content
