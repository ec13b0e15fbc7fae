"""`GET /api/calls/?node=` says how many calls of its selection the node index cannot speak for
(`unindexed`), which no page of the listing shows: recorded while EXTPROXY_NODE_INDEX=0, raw
records, replays stored without a set. The count follows the other filters and the range, and is
bounded (`more` past the bound)."""
from __future__ import annotations

from datetime import datetime, timezone as tz

import pytest

from extproxy.api import views
from extproxy.models import Call
from tests.test_export import auditor
from tests.test_export_nodes import FILTER, FILTER_REPLY, Recording, binding

pytestmark = pytest.mark.django_db


def listed(client, query: str) -> tuple[list[int], dict | None]:
    response = client.get("/api/calls/?" + query)
    assert response.status_code == 200, response.content
    return [c["id"] for c in response.json()["results"]], response.json().get("unindexed")


def test_a_node_listing_counts_the_calls_it_cannot_find(settings, monkeypatch):
    record = Recording(settings, monkeypatch)
    indexed = record("filter", FILTER, FILTER_REPLY)
    record("filter", FILTER, FILTER_REPLY, index=False)
    record("filter", FILTER, FILTER_REPLY, raw=True)
    record("bind", binding("node-x", "b"), index=False)
    original = Call.objects.get(pk=indexed)
    Call.objects.create(**{f.attname: getattr(original, f.attname) for f in Call._meta.concrete_fields
                           if f.attname not in ("id", "call_id", "node_set_id", "is_replay")},
                        is_replay=True, replay_of=original)  # as stored before the runner indexed replays
    client = auditor()

    ids, unindexed = listed(client, "node=node-x")
    assert ids == [indexed]
    assert unindexed["calls"] == 3 and unindexed["more"] is False  # was: no word of them
    assert "EXTPROXY_NODE_INDEX=0" in unindexed["reason"]
    assert listed(client, "node=node-x&replays=include")[1]["calls"] == 4
    assert listed(client, "node=node-x&verb=bind")[1]["calls"] == 1
    assert listed(client, "node=node-x&verdict=failed")[1]["calls"] == 3  # a verdict is not known either
    assert listed(client, "node=node-x&verb=prioritize")[1]["calls"] == 0
    assert listed(client, "node=node-x&since=2100-01-01T00:00:00Z")[1]["calls"] == 0
    assert listed(client, "verb=filter")[1] is None  # no node: nothing the listing cannot find

    monkeypatch.setattr(views, "UNINDEXED_COUNTED", 2)
    assert listed(client, "node=node-x")[1] | {"reason": ""} == {"calls": 2, "more": True, "reason": ""}
    assert listed(client, "node=node-x&until=" + datetime(2000, 1, 1, tzinfo=tz.utc).isoformat().replace("+00:00", "Z"))[1]["calls"] == 0
