"""`manage.py index_nodes`: calls recorded while the node index was off get, from their stored
rows, the very node set the recorder gives the same call with the index on; a node-filtered
export of their range, `complete: false` before, is complete after. Calls recorded through the
recorder's own path (Recorder.write_batch), the real database, the real command."""
from __future__ import annotations

import json

import pytest
from django.core.management import CommandError

from extproxy.models import Call
from tests.conftest import fixture_bytes, fixture_json
from tests.test_api_strict import trace
from tests.test_export import auditor, check, fetch, run_command
from tests.test_export_nodes import BOUND, Recording, binding

pytestmark = pytest.mark.django_db(transaction=True)

NAMES = fixture_bytes("filter-request.nodecache-true.json")
NAMES_REPLY = fixture_bytes("filter-result.nodecache-true.json")


def kinds() -> dict[str, tuple[tuple, dict]]:
    """A call of every kind as the scheduler sends it: (verb, request, reply), and the rest."""
    filtered = dict(fixture_json("filter-request.nodecache-true.json"), NodeNames=["node-01", "node-03"])
    return {
        "names filter": (("filter", NAMES, NAMES_REPLY), {}),
        "full filter": (("filter", fixture_bytes("filter-request.nodecache-false.json"),
                         fixture_bytes("filter-result.nodecache-false.json")), {"node_cache": False}),
        "prioritize": (("prioritize", json.dumps(filtered).encode(), fixture_bytes("prioritize-result.json")), {}),
        "bind": (("bind", binding("node-x", "a"), BOUND), {}),
        "preempt": (("preempt", fixture_bytes("preempt-request.nodecache-true.json"),
                     fixture_bytes("preempt-result.json")), {}),
        "timeout": (("filter", NAMES, b""), {"status": None, "timed_out": True, "transport_error": "timed out"}),
        "combined": (("filter", NAMES, NAMES_REPLY), {"backend": "combined", "form": "combined",
                                                      "backend_calls": [trace("filter", NAMES, NAMES_REPLY)]}),
    }


def test_each_call_recorded_with_the_index_off_gets_the_set_the_recorder_gives_it(settings, monkeypatch):
    record = Recording(settings, monkeypatch)
    pairs = {}
    for name in kinds():
        (args, more), (_, fresh) = kinds()[name], kinds()[name]  # a part's trace is written once
        pairs[name] = (record(*args, **more), record(*args, index=False, **fresh))
    raw = record("filter", NAMES, NAMES_REPLY, index=False, raw=True)
    unreadable = record("filter", b'{"Pod": 5}', NAMES_REPLY, index=False, raw=True)
    off = [twin for _, twin in pairs.values()]
    assert not Call.objects.filter(pk__in=off + [raw], node_set__isnull=False).exists()

    out, _ = run_command("index_nodes")

    assert f"indexed {len(off) + 1} call(s); left unindexed 1 " in out, out
    for name, (indexed, twin) in pairs.items():
        reference = Call.objects.get(pk=indexed).node_set_id
        assert reference is not None and Call.objects.get(pk=twin).node_set_id == reference, name
    # A raw record (its reply unreadable): indexed by its request's nodes, with no verdict.
    entries = Call.objects.get(pk=raw).node_set.entries.values_list("node", "result")
    assert sorted(entries) == sorted((n, "") for n in json.loads(NAMES)["NodeNames"])
    assert Call.objects.get(pk=unreadable).node_set_id is None  # its request names no node it can read

    again, _ = run_command("index_nodes")
    assert again.startswith("indexed 0 call(s); left unindexed 1 "), again


def test_a_node_filtered_export_of_the_range_is_complete_after_it(settings, monkeypatch):
    record = Recording(settings, monkeypatch)
    node = json.loads(NAMES)["NodeNames"][0]
    on = record("filter", NAMES, NAMES_REPLY)
    off = [record("filter", NAMES, NAMES_REPLY, index=False), record("filter", NAMES, NAMES_REPLY, index=False)]
    client = auditor()

    body, manifest = fetch(client, f"format=ndjson&node={node}")
    assert {json.loads(line)["call"] for line in body.splitlines()} == {on}
    assert manifest["complete"] is False and manifest["unindexed"]["calls"] == 2

    run_command("index_nodes")

    body, manifest = fetch(client, f"format=ndjson&node={node}")
    assert {json.loads(line)["call"] for line in body.splitlines()} == {on, *off}
    assert manifest["complete"] is True and manifest["unindexed"] is None and check(body, manifest).complete
    listed = client.get(f"/api/calls/?node={node}").json()
    assert {c["id"] for c in listed["results"]} == {on, *off} and listed["unindexed"]["calls"] == 0


def test_it_takes_a_time_range_and_refuses_while_the_index_is_off(settings, monkeypatch):
    record = Recording(settings, monkeypatch)
    first, second = (record("filter", NAMES, NAMES_REPLY, index=False) for _ in range(2))
    between = Call.objects.get(pk=second).started_at.isoformat()

    out, _ = run_command("index_nodes", "--until", between)

    assert out.startswith("indexed 1 call(s)"), out
    assert Call.objects.get(pk=first).node_set_id is not None and Call.objects.get(pk=second).node_set_id is None
    with pytest.raises(CommandError, match="ISO 8601"):
        run_command("index_nodes", "--since", "yesterday")
    settings.EXTPROXY_NODE_INDEX = False
    with pytest.raises(CommandError, match="EXTPROXY_NODE_INDEX=0"):
        run_command("index_nodes")
