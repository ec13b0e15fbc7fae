"""The calls a run could not replay are found among thousands: listed on their own by the run
page (its error count links to them) and the API (`?errors=1`), counted as they are listed."""
from __future__ import annotations

import json
import re
import time

import pytest

from extproxy.config import RecordingConfig, RedactionConfig, parse_config
from extproxy.models import ReplayRun
from extproxy.recorder import Recorder, Trace
from extproxy.replay.runner import run_replay
from tests.conftest import fixture_json
from tests.test_combined import failing
from tests.test_replay_kind_totals import api_listing
from tests.test_replay_pages import logged_in
from tests.test_replay_scale import without_nagle

pytestmark = pytest.mark.django_db(transaction=True)
CALLS, GONE_EVERY = 450, 90  # every 90th call was recorded for a backend the target no longer has


def record_two_backends() -> None:
    args = fixture_json("captured-kube-scheduler-1.24/filter-request.nodecache-true.json")
    response = json.dumps({"NodeNames": args["NodeNames"], "FailedNodes": {}, "Error": ""}).encode()
    now, batch = time.time(), []
    for i in range(CALLS):
        args["Pod"]["metadata"]["name"], args["Pod"]["metadata"]["uid"] = f"pod-{i}", f"uid-{i}"
        batch.append(Trace(verb="filter", backend="zone" if i % GONE_EVERY == 0 else "gpu", url="http://gpu",
                           started_at=now + i / 1000, finished_at=now + i / 1000 + 0.001,
                           request_body=json.dumps(args).encode(), status=200, response_body=response,
                           answered_status=200, node_cache_capable=True, weight=1))
    Recorder(RecordingConfig(), RedactionConfig()).write_batch(batch)


def test_the_calls_not_replayed_are_listed_on_their_own_and_counted(backend_server, monkeypatch):
    from django.contrib.auth.models import Group, User
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    monkeypatch.setattr("dashboard.replay_pages.ITEMS_SHOWN", 2)  # pages of 2: the errors' own paging shows
    monkeypatch.setattr("extproxy.api.replays.ITEMS_PAGE", 2)
    backend = backend_server({"filter": without_nagle(failing({"gpu-node-1": "cordoned"}))})
    config = parse_config({"backends": [{"name": "gpu", "urlPrefix": backend.url, "filterVerb": "filter",
                                         "nodeCacheCapable": True, "httpTimeout": "5s"}]}, "<test>")
    record_two_backends()
    run = ReplayRun.objects.create(selector={"filters": {}}, target={"kind": "configured"}, rate=0)
    run_replay(run, config=config)
    run.refresh_from_db()
    gone = CALLS // GONE_EVERY
    assert (run.status, run.done, run.errors, run.changed) == ("done", CALLS, gone, CALLS - gone)

    user = User.objects.create_user("dev", password="pw")
    user.groups.add(Group.objects.get(name="developer"))
    api = APIClient(HTTP_AUTHORIZATION="Token " + Token.objects.create(user=user).key)
    total, listed = api_listing(api, run.pk, "errors=1")
    errors = [api.get(f"/api/replays/{run.pk}/items/{item}/").json()["error"] for item in listed]
    assert total == len(listed) == gone and all("'zone' is not in the target" in e for e in errors), (total, errors)
    assert api.get(f"/api/replays/{run.pk}/?errors=maybe").status_code == 400

    pages = logged_in("developer")
    page = pages.get(f"/replays/{run.pk}/").content.decode()
    assert f'<a href="?errors=1">{gone} error(s)</a>' in page, page[:3000]
    seen, query = [], "?errors=1"
    while query:
        page = pages.get(f"/replays/{run.pk}/{query}").content.decode()
        seen += re.findall(r"<span class=\"error\">backend &#x27;zone&#x27; is not in the target</span>", page)
        assert f"of {gone}" in page and "not replayed" in page
        following = re.search(r'<a href="\?([^"]+)">next</a>', page)
        query = "?" + following.group(1).replace("&amp;", "&") if following else ""
    assert len(seen) == gone
