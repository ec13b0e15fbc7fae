"""API strictness: unknown parameters, bad values and page sizes are 400s that name them; the
node filter (and the verdict given to the node) over every kind of recorded call; the
dashboard's filters on the API; the schema generated from the FilterSets."""
from __future__ import annotations

import json
import time

import pytest
import yaml
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from extproxy.config import RecordingConfig, RedactionConfig
from extproxy.recorder import Recorder, Trace
from tests.conftest import fixture_bytes, fixture_json

pytestmark = pytest.mark.django_db


def trace(verb: str, request: bytes, response: bytes, *, node_cache: bool = True, at: float | None = None,
          duration: float = 0.003, status: int | None = 200, backend: str = "gpu", **more) -> Trace:
    at = time.time() if at is None else at
    return Trace(verb=verb, backend=backend, url="http://gpu/scheduler", started_at=at, finished_at=at + duration,
                 request_body=request, status=status, response_body=response, answered_status=status or 504,
                 node_cache_capable=node_cache, weight=2, **more)


def traffic() -> dict[str, int]:
    """One call of every kind, as the scheduler sends them; answers the ids by name."""
    now = float(int(time.time()))  # whole seconds: start + 0.003 s stays exactly 3 ms once in microseconds
    names_filter = trace("filter", fixture_bytes("filter-request.nodecache-true.json"),
                         fixture_bytes("filter-result.nodecache-true.json"), at=now - 10)
    full_filter = trace("filter", fixture_bytes("filter-request.nodecache-false.json"),
                        fixture_bytes("filter-result.nodecache-false.json"), node_cache=False, at=now - 9)
    filtered = dict(fixture_json("filter-request.nodecache-true.json"), NodeNames=["node-01", "node-03"])
    prioritize = trace("prioritize", json.dumps(filtered).encode(), fixture_bytes("prioritize-result.json"),
                       at=now - 8, duration=0.5)
    bind = trace("bind", fixture_bytes("bind-request.json"), b'{"Error":""}', at=now - 7)
    preempt = trace("preempt", fixture_bytes("preempt-request.nodecache-true.json"),
                    fixture_bytes("preempt-result.json"), at=now - 6)
    timeout = trace("filter", fixture_bytes("filter-request.nodecache-true.json"), b"", status=None,
                    timed_out=True, transport_error="timed out after 450 ms", at=now - 5, backend="slow")
    child = trace("filter", fixture_bytes("filter-request.nodecache-true.json"),
                  fixture_bytes("filter-result.nodecache-true.json"), at=now - 4)
    combined = trace("filter", fixture_bytes("filter-request.nodecache-true.json"),
                     fixture_bytes("filter-result.nodecache-true.json"), at=now - 4, backend="combined",
                     form="combined", backend_calls=[child])
    order = ["names_filter", "full_filter", "prioritize", "bind", "preempt", "timeout", "combined"]
    stored = Recorder(RecordingConfig(), RedactionConfig()).write_batch(
        [names_filter, full_filter, prioritize, bind, preempt, timeout, combined]
    )
    return {name: call["id"] for name, call in zip(order, stored)}


@pytest.fixture
def api() -> APIClient:
    user = User.objects.create_superuser("root", "", "pw")
    return APIClient(HTTP_AUTHORIZATION="Token " + Token.objects.create(user=user).key)


def ids(api: APIClient, query: str) -> set[int]:
    response = api.get("/api/calls/?" + query)
    assert response.status_code == 200, response.content
    return {c["id"] for c in response.json()["results"]}


@pytest.mark.parametrize("path", ["/api/calls/", "/api/audit/"])
def test_it_names_unknown_query_parameters(api, path):
    response = api.get(path + "?node_name=node-03&verb=filter&colour=red")
    assert response.status_code == 400
    body = response.json()
    assert body["unknown_parameters"] == (["colour", "node_name"] if path == "/api/calls/" else ["colour", "node_name", "verb"])
    assert "colour" in body["detail"] and "known:" in body["detail"]


@pytest.mark.parametrize("value, says", [("abc", "whole number"), ("0", "whole number"), ("-3", "whole number"),
                                         ("100000", "at most 500"), ("501", "at most 500")])
def test_it_refuses_a_bad_page_size_saying_why(api, value, says):
    response = api.get(f"/api/calls/?page_size={value}")
    assert response.status_code == 400 and says in response.json()["page_size"][0]


def test_it_accepts_the_largest_page_size(api):
    traffic()
    assert len(api.get("/api/calls/?page_size=500").json()["results"]) == 7
    assert len(api.get("/api/calls/?page_size=2").json()["results"]) == 2


def test_it_finds_the_calls_that_involved_a_node_in_every_kind_of_call(api):
    calls = traffic()
    # node-02: in every filter (names, full objects, combined with its child), preempt's victim node
    assert ids(api, "node=node-02") == {calls[k] for k in ("names_filter", "full_filter", "preempt", "timeout", "combined")}
    # node-01: also scored by prioritize and the bind target
    assert ids(api, "node=node-01") == {calls[k] for k in ("names_filter", "full_filter", "prioritize", "bind", "timeout", "combined")}
    assert ids(api, "node=node-99") == set()


def test_it_filters_by_the_verdict_a_node_got(api):
    calls = traffic()
    assert ids(api, "node=node-02&verdict=failed") == {calls[k] for k in ("names_filter", "full_filter", "combined")}
    assert ids(api, "node=node-04&verdict=unresolvable") == {calls[k] for k in ("names_filter", "full_filter", "combined")}
    assert ids(api, "node=node-03&verdict=scored") == {calls["prioritize"]}
    assert ids(api, "node=node-03&verdict=passed") == {calls[k] for k in ("names_filter", "full_filter", "combined")}
    response = api.get("/api/calls/?verdict=failed")
    assert response.status_code == 400 and "needs node" in response.json()["verdict"][0]
    assert api.get("/api/calls/?node=node-02&verdict=maybe").status_code == 400


def test_it_offers_the_dashboards_filters(api):
    calls = traffic()
    assert ids(api, "latency_above=100") == {calls["prioritize"]}
    assert ids(api, "error=timed+out") == {calls["timeout"]}
    assert ids(api, f"ids={calls['bind']},{calls['preempt']}") == {calls["bind"], calls["preempt"]}
    assert ids(api, "outcome=timeout&backend=slow") == {calls["timeout"]}
    assert api.get("/api/calls/?latency_above=fast").status_code == 400
    assert api.get("/api/calls/?latency_above=-1").status_code == 400
    assert api.get("/api/calls/?ids=1,x").status_code == 400


def test_retention_deletes_the_node_sets_no_kept_call_refers_to(api):
    from datetime import timedelta

    from django.utils import timezone

    from extproxy.config import RetentionConfig
    from extproxy.models import Call, NodeSet, NodeSetEntry
    from extproxy.recording.retention import prune

    calls = traffic()
    sets = NodeSet.objects.count()
    assert sets > 1 and NodeSetEntry.objects.count() > sets
    assert Call.objects.filter(node_set__isnull=False).count() == 7
    Call.objects.exclude(pk=calls["bind"]).delete()
    NodeSet.objects.update(last_seen=timezone.now() - timedelta(days=1))  # not seen for long: only use keeps them

    assert prune(RetentionConfig(max_age_seconds=0, max_calls=0, max_bytes=0)).node_sets == sets - 1
    assert NodeSet.objects.count() == 1 and NodeSetEntry.objects.count() == 1
    assert ids(api, "node=node-01") == {calls["bind"]}
    assert ids(api, "node=node-02") == set()


def test_it_generates_the_schema_parameters_from_the_filtersets(api):
    schema = yaml.safe_load(api.get("/api/schema/").content)
    params = {p["name"]: p for p in schema["paths"]["/api/calls/"]["get"]["parameters"]}
    assert {"node", "verdict", "latency_above", "error", "ids", "since", "until", "cursor", "page_size"} <= set(params)
    assert params["verb"]["schema"]["enum"] == ["bind", "filter", "preempt", "prioritize"]
    assert params["verdict"]["schema"]["enum"] == ["failed", "passed", "scored", "unresolvable"]
    audit = {p["name"] for p in schema["paths"]["/api/audit/"]["get"]["parameters"]}
    assert {"action", "actor", "since", "until"} <= audit


def test_it_filters_the_audit_trail(api):
    from extproxy.audit import audit

    audit(None, "export", target="calls", actor="audrey", source="10.0.0.1")
    audit(None, "login", target="bob", actor="bob", source="10.0.0.2")
    results = api.get("/api/audit/?action=export").json()["results"]
    assert [(e["actor"], e["target"]) for e in results] == [("audrey", "calls")]
    assert api.get("/api/audit/?since=soon").status_code == 400


def test_it_says_the_node_filter_is_off_when_the_index_is(api, settings):
    settings.EXTPROXY_NODE_INDEX = False
    traffic()
    from extproxy.models import Call, NodeSet

    assert NodeSet.objects.count() == 0 and not Call.objects.filter(node_set__isnull=False).exists()  # the writer skipped it
    response = api.get("/api/calls/?node=node-01")
    assert response.status_code == 400 and "EXTPROXY_NODE_INDEX" in response.json()["node"][0]
    assert len(api.get("/api/calls/").json()["results"]) == 7


@pytest.mark.parametrize("path", ["/api/calls/", "/api/audit/"])
def test_it_compares_times_in_utc_and_refuses_ones_that_cannot_be(api, path):
    traffic()
    assert api.get(path + "?until=2955-04-13T20:02:02.3%2B20:50").status_code == 200  # an offset PostgreSQL refuses
    response = api.get(path + "?since=0001-01-01T00:30:00%2B01:00")
    assert response.status_code == 400 and "out of range" in response.json()["since"][0]
