"""The recorder's parts in-process: the hand-off and its bounds, draining the spool in
batches, retries, raw records, field bounds, node de-duplication, attempts, retention.

(End-to-end through the real two processes: test_recording_processes.py.)"""
from __future__ import annotations

import json
import time
import zlib

import pytest
from django.db import OperationalError

from extproxy.config import RecordingConfig, RedactionConfig
from extproxy.models import Call, NodeObject, RecordingGap
from extproxy.recording import SpoolRecorder, Trace, compact_body, restore_body
from extproxy.recording.attempts import AttemptTracker
from extproxy.recording.blobs import NodeDeduper, decompress
from extproxy.recording.observe import RECORDER_SILENT_SECONDS, read_recorder_counters, recorders_database, write_recorder_counters
from extproxy.recording.local import LocalRecorder
from extproxy.recording.rows import MAX_ERROR_TEXT, MAX_FINDING_TEXT, MAX_FINDINGS, build_or_raw
from extproxy.recording.spool import SpoolSettings
from extproxy.recording.trace import encode_trace
from extproxy.recording.writer import DATABASE_ERROR_TEXT, Drainer
from tests.conftest import fixture_bytes

def make_trace(verb: str = "filter", body: bytes | None = None, response: bytes | None = None, **fields) -> Trace:
    now = time.time()
    defaults = dict(
        verb=verb,
        backend="gpu",
        url="http://gpu/scheduler/filter",
        started_at=now,
        finished_at=now + 0.002,
        request_body=body if body is not None else fixture_bytes("filter-request.nodecache-true.json"),
        status=200,
        response_body=response if response is not None else fixture_bytes("filter-result.nodecache-true.json"),
        answered_status=200,
        node_cache_capable=True,
        weight=1,
    )
    defaults.update(fields)
    return Trace(**defaults)


def spool_recorder(tmp_path, **recording) -> SpoolRecorder:
    return SpoolRecorder(RecordingConfig(**recording), SpoolSettings(root=tmp_path / "spool"))


def drain(tmp_path, published: list | None = None, **recording) -> Drainer:
    """Drain the spool in this process until it is empty (unit tests; production: manage.py recorder)."""
    drainer = Drainer(tmp_path / "spool", RecordingConfig(**recording), RedactionConfig(),
                      publisher=None if published is None else published.append)
    drainer.run(until_idle=True)
    drainer.close()
    return drainer


def test_it_drops_what_does_not_fit_the_hand_off_counts_it_and_keeps_the_rest(transactional_db, tmp_path):
    recorder = spool_recorder(tmp_path, queue_size=50)
    accepted = [recorder.submit(make_trace()) for _ in range(80)]  # not started: nothing leaves memory
    assert accepted.count(True) == 50 and accepted.count(False) == 30
    assert recorder.drops.counts == {"queue-full": 30}
    recorder.start()
    assert recorder.flush(20) and recorder.spooled == 50
    assert recorder.stop()

    published: list[list[dict]] = []
    drainer = drain(tmp_path, published, batch_size=20)
    assert Call.objects.count() == 50 and drainer.counters.written == 50
    assert sum(len(batch) for batch in published) == 50
    assert max(len(batch) for batch in published) <= 20  # written in batches of at most batch_size


def test_it_drops_at_the_hand_offs_byte_bound_too(tmp_path):
    size = make_trace().size()
    recorder = SpoolRecorder(RecordingConfig(queue_size=1000), SpoolSettings(root=tmp_path / "spool"),
                             handoff_bytes=size * 3 + size // 2)
    results = [recorder.submit(make_trace()) for _ in range(6)]
    assert results.count(True) == 3 and recorder.drops.counts == {"queue-full": 3}


def test_it_records_nothing_when_recording_is_off(tmp_path):
    recorder = spool_recorder(tmp_path, enabled=False)
    recorder.start()
    assert recorder.submit(make_trace()) is False
    assert recorder.flush(1) and recorder.stop()
    assert recorder.spooled == 0 and recorder.drops.counts == {}


def test_it_counts_calls_handed_over_after_shutdown_began(tmp_path):
    recorder = spool_recorder(tmp_path)
    recorder.start()
    assert recorder.submit(make_trace())
    assert recorder.stop()
    assert recorder.submit(make_trace()) is False
    assert recorder.spooled == 1 and recorder.drops.counts == {"stopping": 1}


def test_it_drops_at_the_spool_bound_counts_it_and_raises_the_alarm(tmp_path):
    one = len(encode_trace(make_trace()))  # as spooled: deflated
    recorder = SpoolRecorder(RecordingConfig(), SpoolSettings(root=tmp_path / "spool", max_bytes=one * 5))
    recorder.start()
    for _ in range(10):
        assert recorder.submit(make_trace())  # serving never waits, even at the bound
    assert recorder.flush(20)
    assert recorder.spooled + recorder.drops.counts["spool-full"] == 10
    assert 1 <= recorder.spooled < 5 and recorder.spool_full
    recorder.stop()
    # On disk: the calls, and the gap records that had room (the drops written down, or kept in memory).
    assert recorder.status().depth == recorder.spooled + recorder.drops.gap_records


def test_it_retries_a_batch_when_the_database_fails(transactional_db, tmp_path, monkeypatch):
    recorder = spool_recorder(tmp_path)
    recorder.start()
    body = fixture_bytes("filter-request.nodecache-false.json")
    for _ in range(5):
        recorder.submit(make_trace(body=body, node_cache_capable=False))
    assert recorder.stop()
    drainer = Drainer(tmp_path / "spool", RecordingConfig(batch_size=10), RedactionConfig())
    real = drainer.writer.store
    failures = {"left": 2}
    seen = []

    def flaky(*rows):
        if failures["left"]:
            if failures["left"] == 1:  # what the first failure left for /readyz
                seen.append(read_recorder_counters(tmp_path / "spool")["database"])
            failures["left"] -= 1
            raise OperationalError("database is locked; password=hunter2 " + "x" * 5000)  # a driver may quote anything
        return real(*rows)

    monkeypatch.setattr(drainer.writer, "store", flaky)
    monkeypatch.setattr(drainer.stop, "wait", lambda delay: False)  # no backoff sleep in the test
    drainer.run(until_idle=True)
    drainer.close()
    assert Call.objects.count() == 5 and failures["left"] == 0 and drainer.counters.write_errors == 2
    assert NodeObject.objects.count() == 5  # the failed attempts' nodes were stored on retry
    assert drainer.reader.read(10, 1 << 20).entries == []  # committed: nothing left to read
    failing = seen[0]
    assert failing["ok"] is False and failing["failing_since"] <= time.time()
    assert failing["error"].startswith("OperationalError: database is locked; password=[redacted] xxx")
    assert "hunter2" not in failing["error"] and len(failing["error"]) == DATABASE_ERROR_TEXT
    assert read_recorder_counters(tmp_path / "spool")["database"] == {"ok": True, "failing_since": None, "error": ""}


def test_it_leaves_a_batch_in_the_spool_when_stopped_while_the_database_fails(transactional_db, tmp_path, monkeypatch):
    recorder = spool_recorder(tmp_path)
    recorder.start()
    for _ in range(3):
        recorder.submit(make_trace())
    assert recorder.stop()
    drainer = Drainer(tmp_path / "spool", RecordingConfig(), RedactionConfig())

    def down(*rows):
        drainer.stop.set()  # SIGTERM arrives while the database is down
        raise OperationalError("connection refused")

    monkeypatch.setattr(drainer.writer, "store", down)
    drainer.run()
    drainer.close()
    assert Call.objects.count() == 0
    assert recorder.status().depth == 3  # still in the spool: the next recorder drains it
    drain(tmp_path)
    assert Call.objects.count() == 3 and recorder.status().depth == 0


def test_it_stores_a_call_once_when_it_is_drained_twice(transactional_db, tmp_path):
    recorder = spool_recorder(tmp_path)
    recorder.start()
    for _ in range(3):
        recorder.submit(make_trace())
    recorder.submit(make_trace(body=UNDECODABLE["containers is a number"]()))  # stored as a raw record
    assert recorder.stop()
    first = drain(tmp_path)
    assert (first.counters.written, first.counters.raw) == (4, 1)
    (tmp_path / "spool" / "serve" / "cursor").unlink()  # as if the recorder died before marking it
    published: list[list[dict]] = []
    again = drain(tmp_path, published)
    assert Call.objects.count() == 4 and Call.objects.values("call_id").distinct().count() == 4
    assert sum(map(len, published)) == 0  # nothing new to show live either
    assert (again.counters.written, again.counters.raw) == (0, 0)  # nothing stored again, nothing counted again


def test_its_written_count_is_saved_before_the_spool_reads_empty(transactional_db, tmp_path):
    """Whoever sees the spool drained (a bench, /readyz, an operator) must see the count that
    drained it: the counters are saved before the cursor moves, not after."""
    recorder = spool_recorder(tmp_path)
    recorder.start()
    for _ in range(5):
        recorder.submit(make_trace())
    assert recorder.stop()
    drainer = Drainer(tmp_path / "spool", RecordingConfig(batch_size=2), RedactionConfig())
    seen_at_commit: list[int] = []
    commit = drainer.reader.commit

    def commit_and_look() -> None:
        seen_at_commit.append(read_recorder_counters(tmp_path / "spool").get("written", 0))
        commit()

    drainer.reader.commit = commit_and_look
    drainer.run(until_idle=True)
    drainer.close()
    assert seen_at_commit == [2, 4, 5] and Call.objects.count() == 5


NO_SECRETS = RedactionConfig(env_values=False, drop_annotations=())  # nothing to redact: every byte kept


def test_it_stores_each_distinct_node_once_and_restores_the_request_byte_for_byte(transactional_db):
    body = fixture_bytes("filter-request.nodecache-false.json")
    nodes = NodeDeduper(NO_SECRETS)
    stored = compact_body(body, NO_SECRETS, nodes)
    again = compact_body(body, NO_SECRETS, nodes)  # the scheduler sends an unchanged Node as the same bytes
    assert stored == again
    batch, used = nodes.take_batch()
    assert len(batch) == 5 and used == set(batch)
    assert len(stored) < len(body) / 3

    restored = restore_body(zlib.compress(stored), lambda shas: {s: batch[s][1] for s in shas})
    assert restored == body


def test_it_restores_a_respaced_body_as_it_came_too(transactional_db):
    body = json.dumps(json.loads(fixture_bytes("filter-request.nodecache-false.json")), indent=2).encode()
    nodes = NodeDeduper(NO_SECRETS)
    stored = compact_body(body, NO_SECRETS, nodes)
    batch, _ = nodes.take_batch()
    assert len(batch) == 5
    assert restore_body(zlib.compress(stored), lambda shas: {s: batch[s][1] for s in shas}) == body


def test_it_writes_full_mode_nodes_once_across_batches(transactional_db):
    recorder = LocalRecorder(RecordingConfig(batch_size=2))
    body = fixture_bytes("filter-request.nodecache-false.json")
    for _ in range(6):
        recorder.submit(make_trace(body=body, response=fixture_bytes("filter-result.nodecache-false.json"), node_cache_capable=False))
    assert recorder.flush()
    assert len(recorder.published) == 3
    assert NodeObject.objects.count() == 5 and Call.objects.count() == 6


def test_it_stores_a_raw_record_when_one_trace_cannot_be_built(transactional_db, monkeypatch):
    import extproxy.recording.rows as rows

    real = rows.judge_reply

    def picky(trace, ident):
        if trace.backend == "broken":
            raise KeyError("boom")
        return real(trace, ident)

    monkeypatch.setattr(rows, "judge_reply", picky)
    recorder = LocalRecorder()
    recorder.write_batch([make_trace(backend="broken"), make_trace()])
    assert recorder.writer.raw == 1
    broken = Call.objects.get(backend="broken")
    assert broken.outcome == "error" and broken.findings[0] == {"kind": "undecodable-reply", "detail": "KeyError: 'boom'"}
    assert_raw_but_redacted(broken.request_body, fixture_bytes("filter-request.nodecache-true.json"))
    assert broken.decisions() == [] and broken.pod_name == ""
    assert Call.objects.get(backend="gpu").outcome == "ok"


def _request_variant(change) -> bytes:
    args = json.loads(fixture_bytes("filter-request.nodecache-true.json"))
    change(args)
    return json.dumps(args).encode()


UNDECODABLE = {
    "containers is a number": lambda: _request_variant(lambda a: a["Pod"]["spec"].__setitem__("containers", 5)),
    "env is a number": lambda: _request_variant(lambda a: a["Pod"]["spec"]["containers"][0].__setitem__("env", 5)),
    "invalid UTF-8 in a name": lambda: fixture_bytes("filter-request.nodecache-true.json").replace(
        b'"name": "trainer', b'"name": "\xff\xfetrainer', 1),
    "5000-deep nesting in the Pod": lambda: fixture_bytes("filter-request.nodecache-true.json").replace(
        b'"spec": {', b'"spec": {"deep": ' + b"[" * 5000 + b"]" * 5000 + b", ", 1),
}


def assert_raw_but_redacted(stored: bytes, body: bytes) -> None:
    """`stored` is `body` as received but for values replaced by [redacted], and marked so: the
    fixture's env value (`WARN`, redacted with envValues) among them where the body has it."""
    from extproxy.recording.blobs import restore
    from extproxy.redaction import RAW_MARK_TEXT

    restored = restore(stored, lambda shas: {})
    assert not restored.exact and restored.marks == [RAW_MARK_TEXT]
    assert b"[redacted]" in restored.body and b'"WARN"' not in restored.body
    at = 0
    for kept in restored.body.split(b"[redacted]"):  # all else as received, in order
        found = body.find(kept, at)
        assert found >= at, kept[:80]
        at = found + len(kept)


@pytest.mark.parametrize("case", sorted(UNDECODABLE))
def test_it_stores_undecodable_requests_raw_with_the_reason(case):
    body = UNDECODABLE[case]()
    assert body != fixture_bytes("filter-request.nodecache-true.json")
    (call, kids), raw = build_or_raw(make_trace(body=body), NO_SECRETS, AttemptTracker(), NodeDeduper(NO_SECRETS))
    assert raw and kids == []
    assert call.findings[0]["kind"] == "undecodable-request" and call.findings[0]["detail"]
    assert call.outcome == "error" and (call.pod_namespace, call.pod_name, call.pod_uid) == ("", "", "")
    assert decompress(call.request_body) == b"R" + body  # nothing here looks secret under these rules: as received


@pytest.mark.parametrize("case", sorted(UNDECODABLE))
def test_undecodable_requests_are_stored_with_what_looks_secret_redacted(case):
    body = UNDECODABLE[case]()
    rules = RedactionConfig()
    (call, kids), raw = build_or_raw(make_trace(body=body), rules, AttemptTracker(), NodeDeduper(rules))
    assert raw and call.findings[0]["kind"] == "undecodable-request"
    assert_raw_but_redacted(call.request_body, body)


def test_it_bounds_findings_and_error_texts(transactional_db):
    # 300 scores for hosts the request never had: one finding each, far more than a page shows.
    reply = [{"Host": f"ghost-{i}-" + "x" * 5000, "Score": 1} for i in range(300)]
    scored = make_trace(verb="prioritize", response=json.dumps(reply).encode(),
                        findings=[{"kind": "hot-path-note", "detail": "y" * 100_000}])
    failed = make_trace(status=None, response=b"", timed_out=True, transport_error="z" * 100_000)
    LocalRecorder().write_batch([scored, failed])
    call = Call.objects.get(verb="prioritize")
    assert len(call.findings) == MAX_FINDINGS + 1
    assert call.findings[-1] == {"kind": "findings-truncated", "detail": "201 more findings not kept"}
    assert all(len(f["detail"]) <= MAX_FINDING_TEXT for f in call.findings)
    assert len(Call.objects.get(verb="filter").error) == MAX_ERROR_TEXT


def test_it_links_the_calls_of_one_attempt():
    t = AttemptTracker(window=60)
    first = t.link("uid", "filter", "a", 5, 0)
    assert t.link("uid", "filter", "b", 3, 0.1) == first  # the next backend in the chain
    assert t.link("uid", "prioritize", "a", 2, 0.2) == first
    assert t.link("uid", "bind", "a", 1, 0.3) == first
    second = t.link("uid", "filter", "a", 5, 1.0)  # after a bind: a new attempt
    assert second != first
    third = t.link("uid", "filter", "a", 5, 2.0)  # the same backend filtering again
    assert third != second
    assert t.link("uid", "prioritize", "a", 5, 100.0) != third  # silence past the window
    assert t.link("", "filter", "a", 5, 0) == ""


def test_it_keeps_the_nominated_node_pass_in_the_same_attempt():
    t = AttemptTracker()
    first = t.link("uid", "filter", "a", 1, 0)  # one-node filter for the nominated node
    assert t.link("uid", "filter", "a", 5, 0.1) == first


def test_it_forgets_the_oldest_pods_at_its_bound():
    t = AttemptTracker(max_pods=2)
    a = t.link("a", "filter", "x", 5, 0)
    t.link("b", "filter", "x", 5, 0)
    t.link("c", "filter", "x", 5, 0)
    assert t.link("a", "prioritize", "x", 5, 0.1) != a


def test_it_prunes_calls_past_their_age_and_nodes_no_kept_call_uses(transactional_db):
    from datetime import timedelta

    from django.utils import timezone

    from extproxy.config import RetentionConfig
    from extproxy.models import NodeObject
    from extproxy.recording.retention import prune

    recorder = LocalRecorder()
    old = time.time() - 10 * 86400
    full = fixture_bytes("filter-request.nodecache-false.json")
    recorder.submit(make_trace(body=full, started_at=old, finished_at=old + 1, node_cache_capable=False))
    recorder.submit(make_trace())
    assert recorder.flush()
    NodeObject.objects.update(last_seen=timezone.now() - timedelta(days=10))

    result = prune(RetentionConfig(max_age_seconds=7 * 86400))

    assert result.calls == 1 and Call.objects.count() == 1
    assert result.nodes == 5 and NodeObject.objects.count() == 0


def test_it_keeps_nodes_that_kept_calls_still_use(transactional_db):
    from extproxy.config import RetentionConfig
    from extproxy.recording.retention import prune

    recorder = LocalRecorder()
    full = fixture_bytes("filter-request.nodecache-false.json")
    for _ in range(3):
        recorder.submit(make_trace(body=full, node_cache_capable=False))
    assert recorder.flush()

    result = prune(RetentionConfig(max_age_seconds=7 * 86400, max_calls=2))

    assert result.calls == 1 and Call.objects.count() == 2
    assert NodeObject.objects.count() == 5


def test_it_keeps_redacted_values_out_and_names_each_change(transactional_db):
    from extproxy.recorder import restore

    body = fixture_bytes("filter-request.nodecache-false.json")
    pod = json.loads(body)["Pod"]
    assert pod["spec"]["containers"][0]["env"][0]["value"]  # the fixture carries a secret
    nodes = NodeDeduper(RedactionConfig())
    stored = compact_body(body, RedactionConfig(), nodes)
    batch, _ = nodes.take_batch()

    restored = restore(zlib.compress(stored), lambda shas: {s: batch[s][1] for s in shas})

    assert not restored.exact
    assert "Pod.spec.containers[0].env[0].value redacted" in restored.marks
    again = json.loads(restored.body)
    assert again["Pod"]["spec"]["containers"][0]["env"][0]["value"] == "[redacted]"
    assert again["Nodes"] == json.loads(body)["Nodes"]
    assert pod["spec"]["containers"][0]["env"][0]["value"].encode() not in restored.body


def test_call_ids_made_on_the_hot_path_are_distinct_time_ordered_uuids():
    import time
    import uuid

    from extproxy.models import new_call_id as orm_default
    from extproxy.recording.trace import new_call_id

    before = time.time_ns() // 1_000_000
    ids = [new_call_id() for _ in range(20_000)]
    after = time.time_ns() // 1_000_000
    assert len(set(ids)) == len(ids)
    for text in ids[:2000]:
        parsed = uuid.UUID(text)
        assert str(parsed) == text and parsed.version == 7 and parsed.variant == uuid.RFC_4122
        assert before <= parsed.int >> 80 <= after  # the first 48 bits: Unix time in milliseconds
    time.sleep(0.002)
    later = [new_call_id(), orm_default()]
    assert max(ids) < min(later)  # a later millisecond sorts after: new ids go to the index's edge
    assert uuid.UUID(later[1]).version == 7


@pytest.mark.parametrize("recycle, kept", [(4, 3), (2, 2), (0, 0)])
def test_it_keeps_stored_segments_for_reuse_as_many_as_its_setting_says(transactional_db, tmp_path, settings,
                                                                          recycle, kept):
    from extproxy.recording.spool import free_files, segments

    settings.EXTPROXY_SPOOL_RECYCLE_SEGMENTS = recycle  # the recorder process reads it where it builds its reader
    recorder = SpoolRecorder(RecordingConfig(), SpoolSettings(root=tmp_path / "spool", segment_bytes=1))
    recorder.start()
    for _ in range(3):
        recorder.submit(make_trace())
        assert recorder.flush()  # one segment each
    assert recorder.stop()
    drain(tmp_path)
    directory = tmp_path / "spool" / "serve"
    assert Call.objects.count() == 3
    # All three retired: the stop started an empty fourth, which stays.
    assert len(segments(directory)) == 1 and len(free_files(directory)) == kept
    assert (directory / f"{segments(directory)[0]:020d}.seg").stat().st_size == 0


def record_and_drain(tmp_path, drainer: Drainer, trace: Trace) -> None:
    """One call through a serving side's spool, then `drainer` until the spool is empty."""
    recorder = spool_recorder(tmp_path)
    recorder.start()
    recorder.submit(trace)
    assert recorder.flush(20) and recorder.stop()
    drainer.run(until_idle=True)


@pytest.mark.parametrize("where", ["the recorder's own pass", "a pass elsewhere"])
def test_nodes_retention_deleted_are_stored_again_when_the_recorder_refers_to_them(transactional_db, tmp_path, where):
    """Retention deletes Node objects the recorder still remembers (its own pass, or another
    replica's, or `manage.py prune`): the next call that refers to them stores them again."""
    from datetime import timedelta

    from django.utils import timezone

    from extproxy.config import RetentionConfig
    from extproxy.recording.retention import prune

    body = fixture_bytes("filter-request.nodecache-false.json")
    reply = fixture_bytes("filter-result.nodecache-false.json")
    old = time.time() - 10 * 86400
    retention = RetentionConfig(max_age_seconds=7 * 86400)
    drainer = Drainer(tmp_path / "spool", RecordingConfig(), NO_SECRETS, retention=retention)

    first = make_trace(body=body, response=reply, started_at=old, finished_at=old + 1, node_cache_capable=False)
    record_and_drain(tmp_path, drainer, first)
    assert NodeObject.objects.count() == 5
    NodeObject.objects.update(last_seen=timezone.now() - timedelta(days=10))  # unused since that call
    if where == "a pass elsewhere":
        assert prune(retention).nodes == 5
    else:
        drainer._next_prune = 0.0
        drainer._maybe_prune()
    assert Call.objects.count() == 0 and NodeObject.objects.count() == 0

    for _ in range(2):  # the same Nodes again
        record_and_drain(tmp_path, drainer, make_trace(body=body, response=reply, node_cache_capable=False))
    drainer.close()

    assert drainer.writer.nodes_stored_again == 5
    assert read_recorder_counters(tmp_path / "spool")["nodes_stored_again"] == 5  # /metrics reads these
    kept = dict(NodeObject.objects.values_list("sha256", "data"))
    assert len(kept) == 5
    for call in Call.objects.all():
        assert restore_body(call.request_body, lambda shas: {s: decompress(kept[s]) for s in shas}) == body
        assert restore_body(call.response_body, lambda shas: {s: decompress(kept[s]) for s in shas}) == reply


def test_nodes_stored_before_a_restart_are_refreshed_when_carried_again(transactional_db):
    """A recorder that does not remember a Node object stores it as new; one stored long ago is
    then refreshed, so that retention keeps it while the new call refers to it."""
    from datetime import timedelta

    from django.utils import timezone

    from extproxy.config import RetentionConfig
    from extproxy.recording.retention import prune
    from extproxy.recording.writer import BatchWriter

    body = fixture_bytes("filter-request.nodecache-false.json")
    old = time.time() - 10 * 86400
    BatchWriter(NO_SECRETS).write([make_trace(body=body, started_at=old, finished_at=old + 1, node_cache_capable=False)])
    NodeObject.objects.update(last_seen=timezone.now() - timedelta(days=10))

    BatchWriter(NO_SECRETS).write([make_trace(body=body, node_cache_capable=False)])  # after a restart
    assert NodeObject.objects.filter(last_seen__gt=timezone.now() - timedelta(minutes=1)).count() == 5

    assert prune(RetentionConfig(max_age_seconds=7 * 86400)).calls == 1
    kept = dict(NodeObject.objects.values_list("sha256", "data"))
    assert len(kept) == 5
    assert restore_body(Call.objects.get().request_body, lambda shas: {s: decompress(kept[s]) for s in shas}) == body


def test_nodes_touched_in_a_batch_that_failed_are_touched_again_when_it_is_stored(transactional_db, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    import extproxy.recording.batchwriter as writer_module  # BatchWriter stores through its insert_rows
    from extproxy.recording.writer import BatchWriter

    body = fixture_bytes("filter-request.nodecache-false.json")
    writer = BatchWriter(NO_SECRETS)
    writer.write([make_trace(body=body, node_cache_capable=False)])
    NodeObject.objects.update(last_seen=timezone.now() - timedelta(days=10))

    batch = writer.build([make_trace(body=body, node_cache_capable=False)])  # the same Nodes, from memory
    real = writer_module.insert_rows

    def fails_once(*args, **kwargs):
        monkeypatch.setattr(writer_module, "insert_rows", real)
        raise RuntimeError("the database went away")

    monkeypatch.setattr(writer_module, "insert_rows", fails_once)
    with pytest.raises(RuntimeError):
        writer.store(*batch)  # rolled back: the nodes' last_seen too
    assert not NodeObject.objects.filter(last_seen__gt=timezone.now() - timedelta(minutes=1)).exists()
    writer.store(*batch)
    assert Call.objects.count() == 2
    assert NodeObject.objects.filter(last_seen__gt=timezone.now() - timedelta(minutes=1)).count() == 5


def test_a_prune_leaves_the_rows_a_recorder_is_refreshing(transactional_db):
    """PostgreSQL: a retention pass skips the Node objects and node sets that a recorder's open
    transaction is refreshing (to refer to them), instead of waiting for it and deleting them."""
    import threading
    from datetime import timedelta

    from django.db import connection, transaction
    from django.utils import timezone

    from extproxy.config import RetentionConfig
    from extproxy.models import NodeSet
    from extproxy.recording.retention import prune

    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's; SQLite lets one writer in at a time (run by CI on PostgreSQL)")
    long_ago = timezone.now() - timedelta(days=10)
    for sha in ("a", "b", "c"):
        NodeObject.objects.create(sha256=sha, name=sha, data=b"")
        NodeSet.objects.create(digest=sha, size=0, last_seen=long_ago)
    NodeObject.objects.update(last_seen=long_ago)
    refreshing, done = threading.Event(), threading.Event()
    waited_out: list[bool] = []

    def recorder() -> None:
        try:
            with transaction.atomic():
                NodeObject.objects.filter(sha256="a").update(last_seen=timezone.now())
                NodeSet.objects.filter(digest="a").update(last_seen=timezone.now())
                refreshing.set()
                waited_out.append(not done.wait(30))  # the prune returned while this was open
        finally:
            connection.close()

    thread = threading.Thread(target=recorder)
    thread.start()
    assert refreshing.wait(10)
    try:
        result = prune(RetentionConfig(max_age_seconds=7 * 86400))
    finally:
        done.set()
        thread.join()
    assert waited_out == [False]  # the prune did not wait for the recorder's transaction
    assert (result.nodes, result.node_sets) == (2, 2)
    assert list(NodeObject.objects.values_list("sha256", flat=True)) == ["a"]
    assert list(NodeSet.objects.values_list("digest", flat=True)) == ["a"]


def test_a_recorder_does_not_take_a_node_set_a_prune_is_deleting(transactional_db):
    """PostgreSQL: a node set that a retention pass has locked to delete is waited for and then
    stored anew, instead of being handed to the batch's calls by an id that is gone."""
    import threading

    from django.db import connection, transaction
    from django.utils import timezone

    from extproxy.models import NodeSet, NodeSetEntry
    from extproxy.nodeindex import NodeSets

    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's; SQLite lets one writer in at a time (run by CI on PostgreSQL)")
    pairs = [("node-1", "passed")]
    old = NodeSet.objects.create(digest="d", size=1, last_seen=timezone.now())
    NodeSetEntry.objects.create(node_set=old, node="node-1", result="passed")
    locked, deleted = threading.Event(), threading.Event()

    def prune_elsewhere() -> None:
        try:
            with transaction.atomic():
                list(NodeSet.objects.select_for_update().filter(pk=old.pk))
                locked.set()
                with connection.cursor() as cursor:  # until the recorder waits for this lock
                    for _ in range(200):
                        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                       "AND datname = current_database()")
                        if cursor.fetchone()[0]:
                            break
                        time.sleep(0.05)
                NodeSet.objects.filter(pk=old.pk).delete()
            deleted.set()
        finally:
            connection.close()

    thread = threading.Thread(target=prune_elsewhere)
    thread.start()
    assert locked.wait(10)
    with transaction.atomic():
        ids = NodeSets._store(["d"], {"d": pairs})
    thread.join()
    assert deleted.is_set()
    kept = NodeSet.objects.get(digest="d")
    assert ids == {"d": kept.pk} and kept.pk != old.pk
    assert list(kept.entries.values_list("node", "result")) == pairs


@pytest.mark.parametrize("age, reported, told", [
    (1, True, True), (1, False, False), (1, None, None),
    (RECORDER_SILENT_SECONDS + 5, True, None),  # the recorder is gone or stuck: unknown, not "up"
    (RECORDER_SILENT_SECONDS + 5, False, None),
])
def test_the_database_is_told_as_the_recorder_last_found_it_while_it_reports(tmp_path, age, reported, told):
    write_recorder_counters(tmp_path, {"updated_at": time.time() - age,
                                       "database": {"ok": reported, "failing_since": time.time() - 30, "error": "x"}})
    assert recorders_database(read_recorder_counters(tmp_path))["ok"] is told
    assert recorders_database({})["ok"] is None  # never reported


def previous_report(root, ok: bool | None, age: float, since: float | None = None, error: str = "") -> None:
    """recorder.json as an earlier recorder process left it, `age` seconds ago."""
    write_recorder_counters(root, {"pid": 1, "updated_at": time.time() - age, "written": 0,
                                   "database": {"ok": ok, "failing_since": since, "error": error}})


@pytest.mark.django_db(transaction=True)
def test_a_restarted_recorder_keeps_the_start_of_an_outage_it_takes_over(tmp_path):
    """The outage's start survives a recorder restart (recorder.json), unless that report is old."""
    root = tmp_path / "spool"
    root.mkdir()
    since = time.time() - 240
    previous_report(root, ok=False, age=20, since=since, error="OperationalError: the database system is starting up")
    drainer = Drainer(root, RecordingConfig(), RedactionConfig())
    assert drainer.counters.database_ok is False and drainer.counters.database_failing_since == pytest.approx(since)
    drainer.counters.database_fails("OperationalError: still down")  # the new process's first check
    assert drainer.counters.database_failing_since == pytest.approx(since)
    drainer.run(until_idle=True)  # its check at start: the (test) database answers
    drainer.close()
    saved = json.loads((root / "recorder.json").read_text())["database"]
    assert saved["ok"] is True and saved["failing_since"] is None

    previous_report(root, ok=False, age=700, since=since - 1000, error="old")  # too old to say the outage went on
    drainer = Drainer(root, RecordingConfig(), RedactionConfig())
    assert drainer.counters.database_ok is None
    drainer.close()
    previous_report(root, ok=True, age=1)
    drainer = Drainer(root, RecordingConfig(), RedactionConfig())
    assert drainer.counters.database_ok is None and drainer.counters.database_failing_since is None
    drainer.close()


@pytest.mark.parametrize("report, heartbeat, database_ok, since", [
    ('{"updated_at": "yesterday", "database": {"ok": false, "failing_since": 5}}', False, None, 5.0),
    ('{"updated_at": NOW, "database": {"ok": false, "failing_since": "x", "error": 7}}', True, False, None),
    ('{"updated_at": NOW, "database": {"ok": false, "failing_since": 1e300}}', True, False, None),
    ('{"updated_at": NOW, "database": "down"}', True, None, None),
    ('{"updated_at": NOW, "database": {"ok": "maybe"}}', True, None, None),
    ('[1, 2]', False, None, None),
])
def test_readyz_and_metrics_read_an_odd_recorder_report_as_unknown(tmp_path, report, heartbeat, database_ok, since):
    """Checked where it is read: /readyz and /metrics failed on a time that was not one."""
    from extproxy.recording.observe import RecordingCollector, readiness

    (tmp_path / "recorder.json").write_text(report.replace("NOW", repr(time.time())))
    recorder = SpoolRecorder(RecordingConfig(), SpoolSettings(root=tmp_path))
    ready = readiness(recorder)
    assert (ready["recorder_heartbeat_age_seconds"] is not None) is heartbeat
    assert ready["database"]["ok"] is database_ok and ready["database"]["failing_since"] == since
    collector = RecordingCollector()
    collector.source = recorder
    gauges = {m.name: m.samples[0].value for m in collector.collect() if m.samples}
    assert gauges["extproxy_recorder_database_up"] == (-1 if database_ok is None else int(database_ok))



def test_a_bug_in_the_spool_writer_costs_its_round_counted_and_the_thread_goes_on(transactional_db, tmp_path,
                                                                                 monkeypatch):
    from extproxy.recording.spool_writer import SpoolWriter

    real, failed = SpoolWriter.append, []

    def append(self, payloads, *args):
        if not failed and len(payloads) == 2:  # the calls' first write, not a gap record's
            failed.append(True)
            raise ValueError("a bug")
        return real(self, payloads, *args)

    monkeypatch.setattr(SpoolWriter, "append", append)
    recorder = spool_recorder(tmp_path)
    for _ in range(2):
        recorder.submit(make_trace())  # not started: one batch
    recorder.start()
    assert recorder.flush(20) and failed
    recorder.submit(make_trace())  # the thread still writes
    assert recorder.stop()
    assert recorder.spooled == 1 and recorder.drops.counts == {"spool-error": 2}
    drain(tmp_path)
    assert Call.objects.count() == 1
    assert dict(RecordingGap.objects.values_list("reason", "calls")) == {"spool-error": 2}
