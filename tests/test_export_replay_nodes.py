"""A node-filtered export of replays: the replay runner indexes each replay it records as the
recorder indexes a call, so an export with `node` and `replays=include|only` finds the replays
that involved the node and is complete; a replay the index cannot speak for (recorded while
EXTPROXY_NODE_INDEX=0) is still counted in `unindexed`, and the export is not complete."""
from __future__ import annotations

import csv
import io
import json

import pytest

from extproxy.models import Call, ReplayRun
from extproxy.replay.runner import run_replay
from tests.conftest import pass_all
from tests.test_export import auditor, check, fetch
from tests.test_export_nodes import FILTER, FILTER_REPLY, Recording, by_call
from tests.test_replay_batch_faults import gpu_config
from tests.test_replay_scale import without_nagle

pytestmark = pytest.mark.django_db(transaction=True)

ELSEWHERE = json.dumps({"Pod": {"metadata": {"name": "g", "namespace": "ns", "uid": "uid-g"}},
                        "NodeNames": ["node-z"]}).encode()
ELSEWHERE_REPLY = json.dumps({"NodeNames": ["node-z"], "FailedNodes": {}, "Error": ""}).encode()


def replayed(backend_url: str) -> dict[int, int]:
    """Every recorded filter call replayed by the real runner against a real backend on loopback:
    {original id: its replay's id}."""
    run = ReplayRun.objects.create(selector={"filters": {"verb": "filter"}}, target={"kind": "configured"}, rate=0)
    run_replay(run, config=gpu_config(backend_url))
    run.refresh_from_db()
    assert (run.status, run.errors) == ("done", 0), run.error
    return {item.original_id: item.replay_id for item in run.items.all()}


@pytest.fixture
def calls(settings, monkeypatch, backend_server) -> tuple[dict[str, int], str]:
    record = Recording(settings, monkeypatch)
    originals = {"x": record("filter", FILTER, FILTER_REPLY), "z": record("filter", ELSEWHERE, ELSEWHERE_REPLY)}
    return originals, backend_server({"filter": without_nagle(pass_all)}).url


def test_a_node_filtered_export_of_replays_finds_them_and_is_complete(calls):
    originals, url = calls
    replays = replayed(url)
    assert Call.objects.filter(pk__in=replays.values(), node_set__isnull=False).count() == 2  # was: none
    client = auditor()

    body, manifest = fetch(client, "format=csv&node=node-x&replays=include")
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert {int(r["call"]) for r in rows} == {originals["x"], replays[originals["x"]]}
    replay_rows = sorted((r["node"], r["result"]) for r in rows if int(r["call"]) == replays[originals["x"]])
    assert replay_rows == [("node-x", "passed"), ("node-y", "passed")]  # the backend now passes every node
    assert manifest["unindexed"] is None and manifest["complete"] is True  # was: 2 unindexed, not complete
    assert check(body, manifest).complete

    body, manifest = fetch(client, "format=ndjson&node=node-z&replays=only")
    assert set(by_call(body)) == {replays[originals["z"]]} and manifest["complete"] is True
    assert check(body, manifest).complete
    # A verdict narrows replays as it narrows calls: node-y failed in the original only.
    body, manifest = fetch(client, "format=ndjson&node=node-y&verdict=failed&replays=include")
    assert set(by_call(body)) == {originals["x"]} and manifest["complete"] is True
    # The listing reads the same index.
    listed = client.get("/api/calls/?node=node-x&replays=only").json()["results"]
    assert [c["id"] for c in listed] == [replays[originals["x"]]]


def test_a_replay_recorded_while_the_index_was_off_still_makes_the_export_incomplete(calls, settings):
    originals, url = calls
    indexed = replayed(url)
    settings.EXTPROXY_NODE_INDEX = False
    unknown = replayed(url)  # nothing says which nodes these involved but their stored requests
    settings.EXTPROXY_NODE_INDEX = True
    assert not Call.objects.filter(pk__in=unknown.values(), node_set__isnull=False).exists()

    body, manifest = fetch(auditor(), "format=ndjson&node=node-x&replays=only")
    assert set(by_call(body)) == {indexed[originals["x"]]}
    assert manifest["complete"] is False and manifest["unindexed"]["calls"] == 2
    verdict = check(body, manifest)
    assert verdict.ok and not verdict.complete and "2 calls of the selection not checked for the node" in verdict.message
