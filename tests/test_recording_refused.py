"""What the recorder does with calls the database cannot take as they are: text with NUL (JSON allows
it; PostgreSQL refuses it) is stored with U+FFFD, and a batch the database refuses for any other reason is stored call
by call, the refused call raw, or counted as dropped: never retried for good while the spool
fills. Through the real spool and Drainer, on the test database (SQLite, and PostgreSQL in CI)."""
from __future__ import annotations

import json

import pytest
from django.db import DataError, OperationalError, ProgrammingError

from extproxy.bodies import request_of
from extproxy.config import RecordingConfig, RedactionConfig
from extproxy.models import BackendCall, Call, NodeObject, NodeSetEntry, RecordingGap
from extproxy.recording.bulk import storable_text
from extproxy.recording.writer import Drainer
from tests.conftest import fixture_bytes, fixture_json
from tests.test_recorder import make_trace, spool_recorder

NAMES = "captured-kube-scheduler-1.24/filter-request.nodecache-true.json"
FULL = "captured-kube-scheduler-1.24/filter-request.nodecache-false.json"


def spooled(tmp_path, traces) -> None:
    recorder = spool_recorder(tmp_path)
    recorder.start()
    for trace in traces:
        recorder.submit(trace)
    assert recorder.stop()


def drainer(tmp_path) -> Drainer:
    return Drainer(tmp_path / "spool", RecordingConfig(batch_size=50), RedactionConfig())


def odd_calls() -> list:
    """Calls whose names, reasons and errors hold NUL (a Pod's or Node's strings may; Go's encoder,
    kube-scheduler's, writes it as \\u0000), in names and in full objects."""
    names = fixture_json(NAMES)
    names["Pod"]["metadata"].update(name="pod\u0000one", namespace="ns\u0000", uid="u\u0000")
    names["NodeNames"] += ["node\u0000x"]
    reply = {"NodeNames": names["NodeNames"][:1], "Error": "", "FailedNodes": {"node\u0000x": "full\u0000"}}
    full = fixture_json(FULL)
    full["Pod"]["metadata"]["name"] = "pod\u0000two"
    full["Nodes"]["items"][0]["metadata"]["name"] = "gpu\u0000node"
    full["Nodes"]["items"][1]["metadata"]["labels"] = {"zone\u0000": "a\u0000"}
    # A Node whose object is redacted before it is stored is named on another path.
    full["Nodes"]["items"][2]["metadata"]["name"] = "cpu\u0000node"
    full["Nodes"]["items"][2]["metadata"]["annotations"] = {"db-password": "hunter2"}
    failed = {"NodeNames": None, "Nodes": {"items": []}, "Error": "backend says \u0000", "FailedNodes": {}}
    encode = lambda v: json.dumps(v).encode()  # noqa: E731 (json.dumps writes \u0000 and \ud800 as escapes)
    return [
        make_trace(body=encode(names), response=encode(reply)),
        make_trace(body=encode(full), response=encode(failed), node_cache_capable=False),
    ]


def test_nul_is_stored_replaced_and_nothing_waits(transactional_db, tmp_path):
    spooled(tmp_path, odd_calls())
    drain = drainer(tmp_path)
    published: list[list[dict]] = []
    drain.publisher = published.append  # the live feed
    drain.run(until_idle=True)
    drain.close()
    assert drain.counters.write_errors == 0 and drain.counters.raw == 0 and drain.counters.written == 2
    pods = sorted(Call.objects.values_list("pod_namespace", "pod_name", "pod_uid"))
    assert ("ns\ufffd", "pod\ufffdone", "u\ufffd") in pods
    assert any(name == "pod\ufffdtwo" for _, name, _ in pods)
    assert "backend says \ufffd" in Call.objects.values_list("error", flat=True)
    assert "node\ufffdx" in NodeSetEntry.objects.values_list("node", flat=True)
    assert {"gpu\ufffdnode", "cpu\ufffdnode"} <= set(NodeObject.objects.values_list("name", flat=True))
    assert not any("\x00" in f["detail"] for c in Call.objects.all() for f in c.findings)
    assert drain.reader.read(10, 1 << 20).entries == []  # committed
    # The live feed shows (and links) each pod by the name the database has.
    shown = sorted((c["pod"]["namespace"], c["pod"]["name"], c["pod"]["uid"]) for batch in published for c in batch)
    assert shown == pods
    assert sorted(c["error"] for batch in published for c in batch) == sorted(
        Call.objects.values_list("error", flat=True))


def refusing(drain: Drainer, refuse=lambda call: False, outage_once: bool = False, refuse_nodes: bool = False):
    """The database refuses (DataError) every batch holding a call `refuse(call)` picks (or, with
    `refuse_nodes`, any Node object); with `outage_once`, the first store after the refusal
    fails as an outage would."""
    real = drain.writer.store
    state = {"outage": outage_once, "refused": 0}

    def store(built, new_nodes, *rest):
        if any(refuse(call) for call, _ in built) or (refuse_nodes and new_nodes):
            state["refused"] += 1
            raise DataError("value refused by the database")
        if state["refused"] and state["outage"]:
            state["outage"] = False
            raise OperationalError("server closed the connection unexpectedly")
        return real(built, new_nodes, *rest)

    drain.writer.store = store
    drain.stop.wait = lambda delay: False  # no backoff sleep in the test
    return state


@pytest.mark.parametrize("outage_once", [False, True])
def test_a_refused_call_is_stored_raw_and_the_rest_of_its_batch_as_usual(transactional_db, tmp_path, outage_once):
    traces = [make_trace() for _ in range(5)]
    spooled(tmp_path, traces)
    bad = traces[2].call_id
    drain = drainer(tmp_path)
    state = refusing(drain, lambda call: call.call_id == bad and not any(f["kind"] == "unstorable" for f in call.findings),
                     outage_once)
    drain.run(until_idle=True)
    drain.close()
    assert state["refused"] == 2  # the batch, then the call alone: its raw record was taken
    assert Call.objects.count() == 5 and sorted(Call.objects.values_list("call_id", flat=True)) == sorted(
        t.call_id for t in traces)
    raw = Call.objects.get(call_id=bad)
    assert raw.outcome == "error" and raw.pod_name == "" and raw.findings[0]["kind"] == "unstorable"
    assert "DataError: value refused by the database" in raw.findings[0]["detail"]
    assert Call.objects.exclude(call_id=bad).filter(pod_name="trainer-7d9c5b6f8-b4x2s", outcome="ok").count() == 4
    assert BackendCall.objects.count() == 0 and drain.counters.dropped == {}
    assert (drain.counters.written, drain.counters.raw) == (5, 1)
    assert drain.counters.write_errors == (2 if outage_once else 1)  # the batch refused (and the outage)
    assert drain.counters.database_ok is True  # a refusal is not an outage


def test_a_call_refused_even_raw_is_counted_as_dropped(transactional_db, tmp_path):
    """Each such call is a gap row of its own, though two of them began and ended at once."""
    traces = [make_trace() for _ in range(4)]
    traces[3].started_at, traces[3].finished_at = traces[1].started_at, traces[1].finished_at
    spooled(tmp_path, traces)
    bad = {traces[1].call_id, traces[3].call_id}
    drain = drainer(tmp_path)
    refusing(drain, lambda call: call.call_id in bad)
    drain.run(until_idle=True)
    drain.close()
    assert sorted(Call.objects.values_list("call_id", flat=True)) == sorted(t.call_id for t in traces if t.call_id not in bad)
    assert drain.counters.dropped == {"unstorable": 2} and drain.counters.written == 2
    assert sorted(RecordingGap.objects.values_list("reason", "calls")) == [("unstorable", 1), ("unstorable", 1)]
    assert drain.reader.read(10, 1 << 20).entries == []  # the spool moves on


def test_refused_node_objects_leave_their_calls_stored_raw_with_whole_bodies(transactional_db, tmp_path):
    traces = [make_trace(body=fixture_bytes(FULL), node_cache_capable=False) for _ in range(2)]
    spooled(tmp_path, traces)
    drain = drainer(tmp_path)
    refusing(drain, refuse_nodes=True)
    drain.run(until_idle=True)
    drain.close()
    assert NodeObject.objects.count() == 0 and (drain.counters.written, drain.counters.raw) == (2, 2)
    full_nodes = fixture_json(FULL)["Nodes"]["items"]
    for call in Call.objects.all():
        assert call.findings[0]["kind"] == "unstorable" and "Node objects" in call.findings[0]["detail"]
        nodes = json.loads(request_of(call).data)["Nodes"]["items"]  # whole: no reference to a Node not stored
        assert [n["metadata"]["name"] for n in nodes] == [n["metadata"]["name"] for n in full_nodes]
    assert drain.counters.dropped == {}


def test_a_fault_that_is_not_the_datas_is_retried_and_loses_nothing(transactional_db, tmp_path):
    """A database that will not write for now (read-only, a permission or a table missing): the
    batch waits and is stored whole once it writes again, not taken apart or dropped."""
    traces = [make_trace() for _ in range(4)]
    spooled(tmp_path, traces)
    drain = drainer(tmp_path)
    real, failures = drain.writer.store, {"left": 3}

    def store(*rows):
        if failures["left"]:
            failures["left"] -= 1
            raise ProgrammingError("permission denied for table extproxy_call")
        return real(*rows)

    drain.writer.store = store
    drain.stop.wait = lambda delay: False
    drain.run(until_idle=True)
    drain.close()
    assert failures["left"] == 0 and drain.counters.write_errors == 3
    assert (drain.counters.written, drain.counters.raw, drain.counters.dropped) == (4, 0, {})
    assert Call.objects.filter(outcome="ok").count() == 4


@pytest.mark.parametrize("text, stored", [
    ("plain", "plain"), ("a\u0000b\u0000", "a\ufffdb\ufffd"), ("caf\u00e9", "caf\u00e9"),
    ("x\ud800y", "x?y"), ("\udc80\u0000", "?\ufffd"),
])
def test_storable_text_is_what_any_database_takes(text, stored):
    assert storable_text(text) == stored
