"""A run's totals by kind of change equal the calls listed under that kind, also while the run
goes on: counted by paging through the API and the run page with a run stopped mid-way (its
backend holds the 31st call), not read from the run's figures alone."""
from __future__ import annotations

import re
import threading

import pytest

from extproxy.config import parse_config
from extproxy.models import ReplayItem, ReplayRun
from extproxy.replay import runner
from tests.test_combined import failing
from tests.test_replay_pages import logged_in
from tests.test_replay_scale import record_calls, without_nagle

pytestmark = pytest.mark.django_db(transaction=True)
KIND = "passed->failed"
HELD_AT = 31  # the backend answers 30 calls, then holds the next until released


def held_backend(backend_server):
    release, answered, lock = threading.Event(), [0], threading.Lock()
    drop = without_nagle(failing({"gpu-node-1": "cordoned"}))

    def behave(handler, body):
        with lock:
            answered[0] += 1
            mine = answered[0]
        if mine >= HELD_AT:
            release.wait(60)
        drop(handler, body)

    return backend_server({"filter": behave}), release


def api_listing(api, run_id: int, query: str) -> tuple[int, list[int]]:
    """(items_total of the first page, every item listed over all pages)."""
    listed, offset, total = [], 0, None
    while offset is not None:
        page = api.get(f"/api/replays/{run_id}/?{query}&offset={offset}").json()
        total = page["items_total"] if total is None else total
        listed += [item["id"] for item in page["items"]]
        offset = page["items_next"]
    return total, listed


def test_totals_by_kind_equal_the_calls_listed_while_the_run_goes_on(backend_server, monkeypatch):
    from django.contrib.auth.models import Group, User
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    # Progress is saved every PROGRESS_EVERY seconds: made long here, a total that depends on
    # when it was saved is seen lagging every time, not now and then.
    monkeypatch.setattr(runner, "PROGRESS_EVERY", 3600.0)
    backend, release = held_backend(backend_server)
    config = parse_config({"backends": [{"name": "gpu", "urlPrefix": backend.url, "filterVerb": "filter",
                                         "nodeCacheCapable": True, "httpTimeout": "30s"}]}, "<test>")
    record_calls(60)
    run = ReplayRun.objects.create(selector={"filters": {"verb": "filter"}}, target={"kind": "configured"}, rate=0)
    carried_out = threading.Thread(target=runner.run_replay, args=(run,), kwargs={"config": config})
    carried_out.start()
    try:
        while len(backend.received) < HELD_AT:  # the 31st call is held: 30 items stored
            carried_out.join(0.05)
            assert carried_out.is_alive()
        stored = ReplayItem.objects.filter(run=run).count()
        assert stored == HELD_AT - 1

        user = User.objects.create_user("dev", password="pw")
        user.groups.add(Group.objects.get(name="developer"))
        api = APIClient(HTTP_AUTHORIZATION="Token " + Token.objects.create(user=user).key)
        total, listed = api_listing(api, run.pk, "kind=passed-%3Efailed")
        figures = api.get(f"/api/replays/{run.pk}/").json()
        assert figures["status"] == "running"
        assert total == len(listed) == stored, (total, len(listed))
        assert figures["counts"] == {KIND: stored} and figures["changed"] == figures["done"] == stored, figures

        pages = logged_in("developer")
        page = pages.get(f"/replays/{run.pk}/?kind=passed-%3Efailed").content.decode()
        rows = re.findall(r'<tr class="changed">', page)
        counted = re.search(r'<td><a href="\?kind=passed-%3Efailed">passed-&gt;failed</a></td><td class="num">(\d+)<', page)
        assert counted and int(counted.group(1)) == len(rows) == stored, (counted and counted.group(1), len(rows))
        assert f'class="run-done">{stored}</span>' in page and f'class="run-changed">{stored}</span>' in page
    finally:
        release.set()
        carried_out.join(60)
    run.refresh_from_db()
    assert run.status == "done" and run.counts == {KIND: 60}
    total, listed = api_listing(api, run.pk, "kind=passed-%3Efailed")
    assert total == len(listed) == 60
