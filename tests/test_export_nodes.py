"""Exports and the node: a bind's record names the node it bound to however it was recorded
(the node index off, a raw record, its set gone, the combined form), a node-filtered export
finds those binds, and it says it is not complete when the selection holds calls the node index
cannot speak for (recorded with the index off, replays stored unindexed, raw records) rather than leaving them out
silently. A bind's target comes with its row: no query of its own."""
from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import extproxy.recording.rows as rows
from extproxy import export
from extproxy.config import RecordingConfig, RedactionConfig
from extproxy.models import Call, NodeSet
from extproxy.recorder import Recorder
from tests.test_api_strict import trace
from tests.test_export import auditor, check, fetch, run_command

pytestmark = pytest.mark.django_db

FILTER = json.dumps({"Pod": {"metadata": {"name": "f", "namespace": "ns", "uid": "uid-f"}},
                     "NodeNames": ["node-x", "node-y"]}).encode()
FILTER_REPLY = json.dumps({"NodeNames": ["node-x"], "FailedNodes": {"node-y": "no"}, "Error": ""}).encode()
BOUND = b'{"Error":""}'


def binding(node: str, pod: str) -> bytes:
    return json.dumps({"PodName": pod, "PodNamespace": "ns", "PodUID": f"uid-{pod}", "Node": node}).encode()


class Recording:
    """Records traces through the recorder's own path, each as asked: with the node index off,
    or as a raw record (the reply could not be read: the request is kept as received)."""

    def __init__(self, settings, monkeypatch) -> None:
        self.settings, self.monkeypatch = settings, monkeypatch
        self.at = time.time() - 60

    def __call__(self, verb: str, request: bytes, reply: bytes = BOUND, *, index: bool = True, raw: bool = False,
                 **more) -> int:
        self.at += 1
        self.settings.EXTPROXY_NODE_INDEX = index
        with self.monkeypatch.context() as patch:
            if raw:
                patch.setattr(rows, "judge_reply", _unreadable)
            [stored] = Recorder(RecordingConfig(), RedactionConfig()).write_batch(
                [trace(verb, request, reply, at=self.at, **more)])
        self.settings.EXTPROXY_NODE_INDEX = True
        return stored["id"]


def _unreadable(trace, ident):
    raise KeyError("the reply could not be read")


@pytest.fixture
def record(settings, monkeypatch) -> Recording:
    return Recording(settings, monkeypatch)


def by_call(body: bytes) -> dict[int, list[dict]]:
    found: dict[int, list[dict]] = {}
    for line in body.splitlines():
        r = json.loads(line)
        found.setdefault(r["call"], []).append(r)
    return found


def binds_of_every_kind(record: Recording) -> dict[str, int]:
    calls = {
        "indexed": record("bind", binding("node-x", "a")),
        "index off": record("bind", binding("node-x", "b"), index=False),
        "raw": record("bind", binding("node-x", "c"), raw=True),
        "set gone": record("bind", binding("node-z", "d")),
        "combined, index off": record("bind", binding("node-x", "e"), backend="combined", form="combined", index=False,
                                      backend_calls=[trace("bind", binding("node-x", "e"), BOUND)]),
        "refused, index off": record("bind", binding("node-x", "f"), b'{"Error":"node is full"}', index=False),
        "elsewhere, index off": record("bind", binding("node-y", "g"), index=False),
    }
    gone = Call.objects.get(pk=calls["set gone"]).node_set_id
    assert gone is not None
    NodeSet.objects.filter(pk=gone).delete()  # its entries go with it; the call keeps the id
    return calls


def test_it_names_the_node_of_every_bind_however_it_was_recorded(record):
    calls = binds_of_every_kind(record)
    body, manifest = fetch(auditor(), "format=ndjson")
    records = by_call(body)
    nodes = {name: [r["node"] for r in records[pk]] for name, pk in calls.items()}
    assert nodes == {"indexed": ["node-x"], "index off": ["node-x"], "raw": ["node-x"], "set gone": ["node-z"],
                     "combined, index off": ["node-x"], "refused, index off": ["node-x"],
                     "elsewhere, index off": ["node-y"]}  # all but "indexed" were None
    assert Call.objects.get(pk=calls["raw"]).findings[0]["kind"] == "undecodable-reply"
    assert manifest["complete"] is True and manifest["unindexed"] is None  # no node filter: nothing to check
    assert check(body, manifest).complete


def test_a_combined_binds_failed_part_names_the_node_too(record):
    part = trace("bind", binding("node-x", "p"), b"", status=None, timed_out=True, transport_error="timed out")
    pk = record("bind", binding("node-x", "p"), b'{"Error":"extproxy: backend gpu: no answer"}', backend="combined",
                form="combined", backend_calls=[part])
    body, _ = fetch(auditor(), "format=ndjson&verb=bind")
    assert [(r["kind"], r["node"]) for r in by_call(body)[pk]] == [("call", "node-x"), ("backend-call", "node-x")]


def test_a_node_filtered_export_finds_the_binds_the_index_cannot_and_is_complete(record):
    calls = binds_of_every_kind(record)
    client = auditor()
    body, manifest = fetch(client, "format=csv&node=node-x")
    import csv

    found = {int(r["call"]) for r in csv.DictReader(io.StringIO(body.decode()))}
    assert found == {calls[k] for k in ("indexed", "index off", "raw", "combined, index off", "refused, index off")}
    assert manifest["calls"] == 5 and manifest["unindexed"] is None and manifest["complete"] is True
    assert check(body, manifest).complete
    body, manifest = fetch(client, "format=ndjson&node=node-z")
    assert set(by_call(body)) == {calls["set gone"]} and manifest["complete"] is True
    body, manifest = fetch(client, "format=ndjson&node=node-y")
    assert set(by_call(body)) == {calls["elsewhere, index off"]}
    # A bind gives no verdict: with one, no bind is a candidate, indexed or not.
    body, manifest = fetch(client, "format=ndjson&node=node-x&verdict=passed")
    assert body == b"" and manifest["complete"] is True


def test_a_node_filtered_export_is_not_complete_while_calls_the_index_cannot_speak_for_are_in_it(record):
    indexed = record("filter", FILTER, FILTER_REPLY)
    unindexed = [record("filter", FILTER, FILTER_REPLY, index=False), record("filter", FILTER, FILTER_REPLY, raw=True),
                 record("bind", b'{"PodName": "h", "Node": ')]  # a bind whose request cannot be read
    assert Call.objects.get(pk=unindexed[-1]).findings[0]["kind"] == "bad-request"
    client = auditor()
    body, manifest = fetch(client, "format=ndjson&node=node-x")
    assert set(by_call(body)) == {indexed}  # was: this, and complete
    assert manifest["complete"] is False and manifest["gaps"] == [] and manifest["still_open"] is None
    assert manifest["unindexed"]["calls"] == 3 and "EXTPROXY_NODE_INDEX=0" in manifest["unindexed"]["reason"]
    verdict = check(body, manifest)
    assert verdict.ok and not verdict.complete and "3 calls of the selection not checked for the node" in verdict.message
    # The count follows the other filters and the range: none of them is a prioritize call.
    _, manifest = fetch(client, "format=ndjson&node=node-x&verb=prioritize")
    assert manifest["complete"] is True and manifest["unindexed"] is None
    _, manifest = fetch(client, "format=ndjson&node=node-x&verb=filter")
    assert manifest["unindexed"]["calls"] == 2
    # Without a node filter the same calls are all there: complete.
    body, manifest = fetch(client, "format=ndjson")
    assert set(by_call(body)) == {indexed, *unindexed} and manifest["complete"] is True


def test_replays_are_calls_the_index_cannot_speak_for(record):
    original = Call.objects.get(pk=record("filter", FILTER, FILTER_REPLY))
    Call.objects.create(**{f.attname: getattr(original, f.attname) for f in Call._meta.concrete_fields
                           if f.attname not in ("id", "call_id", "node_set_id", "is_replay")},
                        is_replay=True, replay_of=original)  # as stored before the runner indexed replays
    client = auditor()
    _, manifest = fetch(client, "format=ndjson&node=node-x")
    assert manifest["complete"] is True  # replays are left out by default
    body, manifest = fetch(client, "format=ndjson&node=node-x&replays=only")
    assert body == b"" and manifest["complete"] is False and manifest["unindexed"]["calls"] == 1


def test_the_command_says_why_a_node_filtered_export_is_not_complete(record, tmp_path):
    record("filter", FILTER, FILTER_REPLY, index=False)
    bound = record("bind", binding("node-x", "b"), index=False)
    out = tmp_path / "calls.ndjson"
    _, err = run_command("export", "-o", str(out), "--node", "node-x", "--no-progress")
    assert "NOT complete: 1 calls of the selection not checked for the node" in err
    manifest = json.loads(Path(f"{out}.manifest.json").read_text())
    assert manifest["unindexed"]["calls"] == 1 and set(by_call(out.read_bytes())) == {bound}


def test_the_binds_of_a_chunk_cost_no_query_of_their_own(record, monkeypatch):
    monkeypatch.setattr(export, "CALLS_PER_READ", 10)

    def queries(calls: int) -> int:
        Call.objects.all().delete()
        Recorder(RecordingConfig(), RedactionConfig()).write_batch(
            [trace("bind", binding("node-x", f"p{i}"), BOUND) for i in range(calls)])
        tally = export.Tally()
        with CaptureQueriesContext(connection) as seen:
            records = list(export.call_records(Call.objects.all(), tally, "node-x"))
        assert len(records) == calls and all(r[10] == "node-x" for r in records)
        return len(seen)

    # 30 more binds, 3 more chunks of 10: never a query a bind (the requests come with the rows).
    assert queries(50) - queries(20) <= 3


@pytest.mark.parametrize("body", [
    b'{"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "node-01"}',  # the scheduler's form
    b'{"podname": "p", "NODE": "in-any-case"}', b'{"Node": "escaped-\\u0041"}', b'{"Node": "a\xffb"}',
    b'{"Node": "a", "Node": "b"}', b'{"Node": "x", "node": "y"}', b'{"Node": null}', b'{"Node": "\\ud800"}',
    b'{"Node": 5}', b'{"PodName": 5, "Node": "x"}', b"[1]", b"", b'{"PodName": "h", "Node": ',
])
def test_a_binds_target_is_read_as_the_schedulers_decoder_reads_it(body):
    from extproxy.bodies import bind_target
    from extproxy.protocol import ProtocolError, decode_binding_args
    from extproxy.recording.blobs import NodeDeduper
    from extproxy.recording.rows import AttemptTracker, build_or_raw

    rules = RedactionConfig()
    (call, _), _raw = build_or_raw(trace("bind", body, BOUND), rules, AttemptTracker(), NodeDeduper(rules))
    try:
        expected = decode_binding_args(body).node
    except ProtocolError:
        expected = None
    assert bind_target(call.request_body) == expected
    assert bind_target(b"not zlib") is None and bind_target(b"") is None


def test_the_commands_progress_counts_the_binds_it_passes_over(record, tmp_path):
    record("bind", binding("node-x", "a"), index=False)
    record("bind", binding("node-y", "b"), index=False)
    record("bind", b'{"PodName": "h", "Node": ')
    out = tmp_path / "calls.ndjson"
    _, err = run_command("export", "-o", str(out), "--node", "node-x")
    assert "3/3 calls (100%), 1 records" in err  # read all three, exported one
    assert "NOT complete: 1 calls of the selection not checked for the node" in err  # the unread bind
