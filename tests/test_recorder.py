"""The recorder: bounded queue, batching, what happens at the bound, attempts, compaction."""
from __future__ import annotations

import json
import time
import zlib

from extproxy.config import RecordingConfig, RedactionConfig
from extproxy.models import Call, NodeObject
from extproxy.recorder import AttemptTracker, NodeDeduper, Recorder, Trace, compact_body, restore_body
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


def test_it_drops_what_does_not_fit_counts_it_and_keeps_the_rest(transactional_db):
    published: list[list[dict]] = []
    recorder = Recorder(RecordingConfig(queue_size=50, batch_size=20), RedactionConfig(), publisher=published.append)
    # Hold the writer back so the burst meets a full queue: it starts on first submit.
    recorder._thread = object()  # type: ignore[assignment]
    accepted = [recorder.submit(make_trace()) for _ in range(80)]
    assert accepted.count(True) == 50 and accepted.count(False) == 30
    assert recorder.dropped == 30
    recorder._thread = None
    recorder.start()

    assert recorder.flush(20)
    recorder.stop()
    assert Call.objects.count() == 50
    assert sum(len(batch) for batch in published) == 50
    assert max(len(batch) for batch in published) <= 20  # written in batches of at most batch_size


def test_it_drops_at_the_byte_bound_too(transactional_db):
    recorder = Recorder(RecordingConfig(queue_size=1000), RedactionConfig(), queue_bytes=10_000)
    recorder._thread = object()  # type: ignore[assignment]
    trace = make_trace()
    fits = 10_000 // trace.size()
    results = [recorder.submit(make_trace()) for _ in range(fits + 3)]
    assert results.count(True) == fits and recorder.dropped == 3


def test_it_records_nothing_when_recording_is_off(transactional_db):
    recorder = Recorder(RecordingConfig(enabled=False), RedactionConfig())
    assert recorder.submit(make_trace()) is False
    assert recorder.flush(1)
    assert Call.objects.count() == 0


def test_it_retries_a_batch_when_the_database_fails(transactional_db, monkeypatch):
    recorder = Recorder(RecordingConfig(batch_size=10, flush_interval=0.01), RedactionConfig())
    real = recorder.store_batch
    failures = {"left": 2}

    def flaky(*rows):
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("database is locked")
        return real(*rows)

    monkeypatch.setattr(recorder, "store_batch", flaky)
    body = fixture_bytes("filter-request.nodecache-false.json")
    for _ in range(5):
        recorder.submit(make_trace(body=body, node_cache_capable=False))
    assert recorder.flush(20)
    recorder.stop()
    assert Call.objects.count() == 5 and failures["left"] == 0
    assert NodeObject.objects.count() == 5  # the failed attempts' nodes were stored on retry


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
    recorder = Recorder(RecordingConfig(batch_size=2), RedactionConfig())
    body = fixture_bytes("filter-request.nodecache-false.json")
    for _ in range(6):
        recorder.submit(make_trace(body=body, response=fixture_bytes("filter-result.nodecache-false.json"), node_cache_capable=False))
    assert recorder.flush(20)
    recorder.stop()
    assert NodeObject.objects.count() == 5 and Call.objects.count() == 6


def test_it_keeps_recording_when_one_trace_cannot_be_built(transactional_db, monkeypatch):
    import extproxy.recorder as rec

    real = rec.judge

    def picky(trace):
        if trace.backend == "broken":
            raise KeyError("boom")
        return real(trace)

    monkeypatch.setattr(rec, "judge", picky)
    recorder = Recorder(RecordingConfig(), RedactionConfig())
    recorder.submit(make_trace(backend="broken"))
    recorder.submit(make_trace())
    assert recorder.flush(20)
    recorder.stop()
    assert list(Call.objects.values_list("backend", flat=True)) == ["gpu"]


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
    from extproxy.retention import prune

    recorder = Recorder(RecordingConfig(), RedactionConfig())
    old = time.time() - 10 * 86400
    full = fixture_bytes("filter-request.nodecache-false.json")
    recorder.submit(make_trace(body=full, started_at=old, finished_at=old + 1, node_cache_capable=False))
    recorder.submit(make_trace())
    assert recorder.flush(20)
    recorder.stop()
    NodeObject.objects.update(last_seen=timezone.now() - timedelta(days=10))

    result = prune(RetentionConfig(max_age_seconds=7 * 86400))

    assert result.calls == 1 and Call.objects.count() == 1
    assert result.nodes == 5 and NodeObject.objects.count() == 0


def test_it_keeps_nodes_that_kept_calls_still_use(transactional_db):
    from extproxy.config import RetentionConfig
    from extproxy.retention import prune

    recorder = Recorder(RecordingConfig(), RedactionConfig())
    full = fixture_bytes("filter-request.nodecache-false.json")
    for _ in range(3):
        recorder.submit(make_trace(body=full, node_cache_capable=False))
    assert recorder.flush(20)
    recorder.stop()

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
