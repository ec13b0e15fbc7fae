"""What the recorder remembers between calls to stay cheap: redacted Pods by their bytes, Node
objects kept as received with their redaction marks, and the redaction diff itself.

Each cached answer must be the answer computed afresh, and every cache has a bound."""
from __future__ import annotations

import json
import zlib

import msgspec
import pytest

from extproxy import bodyformat
from extproxy.config import RedactionConfig
from extproxy.recording import compact_body
from extproxy.recording.blobs import NodeDeduper, RedactionCache, restore
from tests.conftest import fixture_bytes


def _restore(stored: bytes, nodes: NodeDeduper, batch: dict) -> bodyformat.Restored:
    return restore(zlib.compress(stored), lambda shas: {s: batch[s][1] for s in shas})


def test_a_pod_seen_again_is_stored_alike_from_the_cache_and_still_redacted():
    body = fixture_bytes("filter-request.nodecache-true.json")
    secret = json.loads(body)["Pod"]["spec"]["containers"][0]["env"][0]["value"]
    rules = RedactionConfig()
    nodes = NodeDeduper(rules)

    first = compact_body(body, rules, nodes)
    again = compact_body(body, rules, nodes)
    fresh = compact_body(body, rules, NodeDeduper(rules))

    # the Pod once afresh (NodeNames names nodes: kept as sent, never read as free text)
    assert (nodes.redact_field.misses, nodes.redact_field.hits) == (1, 1)
    assert first == again == fresh
    restored = _restore(again, nodes, {})
    assert secret.encode() not in restored.body
    assert "Pod.spec.containers[0].env[0].value redacted" in restored.marks


def test_a_node_that_needs_redaction_keeps_its_marks_when_seen_again():
    body = json.loads(fixture_bytes("filter-request.nodecache-false.json"))
    body["Nodes"]["items"][0]["metadata"]["annotations"]["example.com/api-token"] = "s3cr3t-value"
    raw = json.dumps(body, separators=(",", ":")).encode()
    rules = RedactionConfig()
    nodes = NodeDeduper(rules)

    first = compact_body(raw, rules, nodes)
    batch, _ = nodes.take_batch()
    again = compact_body(raw, rules, nodes)
    new_in_second, used = nodes.take_batch()

    assert first == again
    assert not new_in_second and len(used) == 5  # every node referred to, none stored twice
    restored = _restore(again, nodes, batch)
    assert b"s3cr3t-value" not in restored.body
    assert "Nodes.items[0].metadata.annotations['example.com/api-token'] redacted" in restored.marks


def test_the_redaction_cache_keeps_at_most_its_bound_least_recently_used_out_first():
    calls: list[bytes] = []

    def redact(name: str, value: bytes):
        calls.append(value)
        return value.upper(), ["x redacted"]

    cache = RedactionCache(redact, max_bytes=8 * 1024)
    values = [b"%04d" % i + b"a" * 200 for i in range(100)]
    for value in values:
        assert cache("Pod", value) == (value.upper(), ["x redacted"])
        assert cache.kept_bytes <= 8 * 1024
    cache("Pod", values[-1])  # recent: still there
    cache("Pod", values[0])  # long gone: computed again
    assert calls.count(values[-1]) == 1 and calls.count(values[0]) == 2

    big = b"b" * 2048  # more than an eighth of the bound: answered, never kept
    cache("Pod", big)
    cache("Pod", big)
    assert calls.count(big) == 2


def test_the_cache_tells_fields_apart():
    cache = RedactionCache(lambda name, value: (name.encode(), [name]), max_bytes=1 << 20)
    assert cache("Pod", b"{}") == (b"Pod", ["Pod"])
    assert cache("NodeNameToVictims", b"{}") == (b"NodeNameToVictims", ["NodeNameToVictims"])


def test_redaction_marks_name_each_change_and_nothing_else():
    before = {"a": {"b": [1, {"c": "x", "d": "y"}], "e": "same"}, "odd-key": "v", "gone": 1, "same": [1, 2]}
    after = {"a": {"b": [1, {"c": "[redacted]", "d": "y"}], "e": "same"}, "odd-key": "[redacted]", "same": [1, 2]}
    assert bodyformat.redaction_marks(before, after) == [".a.b[1].c redacted", "['odd-key'] redacted", ".gone removed"]
    assert bodyformat.redaction_marks(before, json.loads(json.dumps(before))) == []
    assert bodyformat.redaction_marks({"l": [1, 2]}, {"l": [1]}) == [".l redacted"]


@pytest.mark.parametrize("large", [False, True], ids=["hashed", "compared-first"])
def test_a_verdict_is_remembered_only_for_the_same_backend_status_reply_and_nodes(large):
    from extproxy.recording.verdicts import COMPARE_FROM, VerdictMemo
    from extproxy.semantics import Decision, Outcome, Result, Verdict

    computed: list[int] = []

    def compute(n: int):
        def run():
            computed.append(n)
            return Verdict(outcome=Outcome.OK, error="", findings=[],
                           decisions=[Decision(node=f"n{i}", backend="b", result=Result.PASSED) for i in range(n)])
        return run

    pad = b" " * COMPARE_FROM if large else b""  # large replies are compared byte for byte before hashing

    def r(text: bytes) -> bytes:
        return text + pad

    memo = VerdictMemo(max_decisions=64)
    what = ("filter", "b", "http://b", "filter", True, 1)
    first = memo.judge(what, 200, r(b"reply"), ["n0", "n1"], compute(2))
    assert memo.judge(what, 200, r(b"reply"), ["n0", "n1"], compute(2)) is first
    memo.judge(what, 200, r(b"reply"), ["n0"], compute(1))  # other nodes
    memo.judge(what, 500, r(b"reply"), ["n0", "n1"], compute(2))  # other status
    memo.judge(what, 200, r(b"other"), ["n0", "n1"], compute(2))  # other reply
    memo.judge(("filter", "c", "http://b", "filter", True, 1), 200, r(b"reply"), ["n0", "n1"], compute(2))  # other backend
    nodes = ["n0", "n1"]
    memo.judge(what, 200, r(b"kept"), nodes, compute(2))
    nodes.append("n2")  # the caller's list changes afterwards: what was judged did not
    memo.judge(what, 200, r(b"kept"), nodes, compute(3))
    assert computed == [2, 1, 2, 2, 2, 2, 3]

    for i in range(40):  # 3 decisions held each (2 + 1): the bound is 64
        memo.judge(what, 200, r(b"r%d" % i), ["n0", "n1"], compute(2))
        assert memo.held <= 64
    computed.clear()
    memo.judge(what, 200, r(b"reply"), ["n0", "n1"], compute(2))  # long since evicted
    memo.judge(what, 200, r(b"big"), [], compute(10))  # more than a sixteenth of the bound: not kept
    memo.judge(what, 200, r(b"big"), [], compute(10))
    assert computed == [2, 10, 10]


def test_calls_judged_from_the_memo_are_stored_as_judged_afresh(transactional_db):
    from extproxy.recording import rows
    from extproxy.recording.attempts import AttemptTracker
    from extproxy.recording.rows import build_or_raw
    from tests.test_recorder import make_trace

    def decisions_of(trace):
        (call, _), raw = build_or_raw(trace, RedactionConfig(), AttemptTracker(), NodeDeduper(RedactionConfig()))
        assert not raw
        return call.decisions(), (call.passed_count, call.failed_count, call.unresolvable_count)

    first = decisions_of(make_trace())
    hits = rows.VERDICTS.hits
    again = decisions_of(make_trace())
    assert rows.VERDICTS.hits == hits + 1
    assert again == first and first[1] != (0, 0, 0)


def test_a_remembered_reply_that_carries_node_objects_still_marks_them_used(transactional_db):
    """Retention keeps a Node object while calls refer to it (the writer refreshes what a
    batch used), so a reply's stored form that refers to Nodes is made again for every call."""
    from extproxy.recording.attempts import AttemptTracker
    from extproxy.recording.rows import build_or_raw
    from tests.test_recorder import make_trace

    def trace():
        # Node objects in the reply only (a names-mode request), so only the reply marks them used
        return make_trace(body=fixture_bytes("filter-request.nodecache-true.json"),
                          response=fixture_bytes("filter-result.nodecache-false.json"), node_cache_capable=False)

    rules = RedactionConfig()
    nodes = NodeDeduper(rules)
    (first, _), _ = build_or_raw(trace(), rules, AttemptTracker(), nodes)
    _, used_first = nodes.take_batch()
    (again, _), _ = build_or_raw(trace(), rules, AttemptTracker(), nodes)
    _, used_again = nodes.take_batch()
    assert used_first and used_again == used_first
    assert (again.response_body, again.decisions_blob) == (first.response_body, first.decisions_blob)
    assert again._node_pairs == first._node_pairs and first._node_pairs[1]


def test_a_request_body_seen_again_is_stored_from_the_body_cache_as_made_afresh():
    body = fixture_bytes("filter-request.nodecache-true.json")
    rules = RedactionConfig()
    nodes = NodeDeduper(rules)

    first = nodes.stored_body(body)
    again = nodes.stored_body(body)

    assert first == again
    assert zlib.decompress(again) == compact_body(body, rules, NodeDeduper(rules))
    # The second call did not redact the Pod again: the whole stored form was remembered.
    assert (nodes.redact_field.misses, nodes.redact_field.hits) == (1, 0)


def test_a_body_with_node_objects_is_made_again_so_its_nodes_are_marked_used_each_time():
    body = fixture_bytes("filter-request.nodecache-false.json")
    nodes = NodeDeduper(RedactionConfig())

    nodes.stored_body(body)
    first_new, first_used = nodes.take_batch()
    nodes.stored_body(body)
    second_new, second_used = nodes.take_batch()

    assert len(first_new) == 5 and first_used == set(first_new)
    assert not second_new and second_used == first_used


def test_the_body_cache_keeps_at_most_its_bound():
    template = json.loads(fixture_bytes("filter-request.nodecache-true.json"))
    nodes = NodeDeduper(RedactionConfig(), stored_body_bytes=32 << 10)
    for i in range(50):
        template["Pod"]["metadata"]["name"] = f"pod-{i}"
        nodes.stored_body(json.dumps(template).encode())
        assert nodes.stored.bytes <= 32 << 10
    assert 0 < len(nodes.stored) < 50


def test_a_body_larger_than_the_limit_is_remembered_by_its_bytes_with_its_nodes(monkeypatch):
    from extproxy.recording import blobs

    monkeypatch.setattr(blobs, "STORED_BODY_MAX", 100)
    body = _with_pod_name(fixture_bytes("filter-request.nodecache-false.json"), "web-0")
    nodes = NodeDeduper(RedactionConfig())

    def cut() -> int:  # bodies cut apart so far: each has its Pod redacted once
        return nodes.redact_field.misses + nodes.redact_field.hits

    first = nodes.stored_body(body)
    first_new, first_used = nodes.take_batch()
    refs = nodes.refs
    assert nodes.stored_body(bytes(body)) == first and cut() == 1  # the same bytes: not cut again
    again_new, again_used = nodes.take_batch()
    assert not again_new and again_used == first_used == set(first_new) and nodes.refs == refs + 5
    assert not len(nodes.stored)  # not by its SHA-256: it refers to Node objects

    others = [_with_pod_name(body, f"pod-{i}") for i in range(blobs.LARGE_BODIES)]
    for other in others:
        nodes.stored_body(other)
    assert cut() == 1 + len(others)
    nodes.stored_body(others[-1])
    assert cut() == 1 + len(others)
    nodes.stored_body(body)  # the oldest of five: out of memory
    assert cut() == 2 + len(others)

    assert restore(first, lambda shas: {s: first_new[s][1] for s in shas}).body.replace(REDACTED, SECRET) == body


SECRET = json.dumps(json.loads(fixture_bytes("filter-request.nodecache-false.json"))["Pod"]["spec"]["containers"][0]
                    ["env"][0]["value"]).encode()
REDACTED = b'"[redacted]"'


def _with_pod_name(body: bytes, name: str) -> bytes:
    data = json.loads(body)
    data["Pod"]["metadata"]["name"] = name
    return json.dumps(data, separators=(",", ":")).encode()


def test_a_node_list_seen_again_is_spliced_from_memory_as_made_afresh():
    template = fixture_bytes("filter-request.nodecache-false.json")
    bodies = [_with_pod_name(template, name) for name in ("web-0", "a-much-longer-pod-name-1")]
    rules = RedactionConfig()
    nodes = NodeDeduper(rules)
    added: list[bytes] = []
    add_exact = nodes.add_exact
    nodes.add_exact = lambda raw: added.append(raw) or add_exact(raw)  # type: ignore[method-assign]

    first = compact_body(bodies[0], rules, nodes)
    batch, first_used = nodes.take_batch()
    refs = nodes.refs
    again = compact_body(bodies[1], rules, nodes)
    new_in_second, second_used = nodes.take_batch()

    assert len(added) == 5 and (nodes.lists.misses, nodes.lists.hits) == (1, 1)  # not one Node cut out again
    assert nodes.refs == refs + 5 and not new_in_second and second_used == first_used == set(batch)
    assert first == compact_body(bodies[0], rules, NodeDeduper(rules))
    assert again == compact_body(bodies[1], rules, NodeDeduper(rules))
    pieces, _ = msgspec.msgpack.decode(again[1:])
    assert b',"Nodes":{"metadata":{},"items":[' in pieces  # neighbouring literal bytes are one piece
    for body, stored in zip(bodies, (first, again)):  # byte for byte but the Pod's redacted secret
        restored = _restore(stored, nodes, batch).body
        assert restored.replace(REDACTED, SECRET) == body


def test_a_node_list_with_one_node_changed_is_spliced_afresh():
    data = json.loads(fixture_bytes("filter-request.nodecache-false.json"))
    rules = RedactionConfig()
    nodes = NodeDeduper(rules)
    first_body = json.dumps(data, separators=(",", ":")).encode()
    first = compact_body(first_body, rules, nodes)
    batch, _ = nodes.take_batch()
    data["Nodes"]["items"][3]["metadata"]["labels"]["zone"] = "moved"
    changed_body = json.dumps(data, separators=(",", ":")).encode()

    changed = compact_body(changed_body, rules, nodes)
    new, used = nodes.take_batch()

    assert (nodes.lists.misses, nodes.lists.hits) == (2, 0)
    assert len(new) == 1 and len(used) == 5
    batch.update(new)
    assert _restore(changed, nodes, batch).body.replace(REDACTED, SECRET) == changed_body
    assert _restore(first, nodes, batch).body.replace(REDACTED, SECRET) == first_body


def test_the_node_list_memory_keeps_the_lists_used_last_within_its_bound():
    touched: list[list[str]] = []
    lists = bodyformat.SplicedLists(touched.append, keep=2, max_bytes=4000)

    def spliced(value: bytes):
        return bodyformat._splice_nodes(value, lambda raw: (str(len(raw)), []))

    values = [b'{"items":[{"a":%d}]}' % i for i in range(3)] + [b'{"items":[{"big":"' + b"x" * 1200 + b'"}]}']
    for value in values[:3]:
        lists.keep(value, spliced(value))
    assert lists.find(values[0]) is None  # two kept: the oldest went
    assert lists.find(values[1]) is not None and lists.find(values[2]) is not None
    assert touched == [["7"], ["7"]]  # each list found again names its Nodes
    lists.keep(values[3], spliced(values[3]))  # 2 × its bytes > a quarter of the bound: not kept
    assert lists.find(values[3]) is None and lists.find(values[2]) is not None
    assert lists.find(b'{"items":[{"a":9}]}') is None  # same length, other bytes


def test_the_large_replies_compared_first_are_bounded_in_number_and_bytes(monkeypatch):
    import hashlib

    from extproxy.recording import verdicts
    from extproxy.semantics import Outcome, Verdict

    hashed: list[int] = []  # a reply found among those compared is not hashed again

    class CountingHashlib:
        @staticmethod
        def sha256(data: bytes):
            hashed.append(1)
            return hashlib.sha256(data)

    monkeypatch.setattr(verdicts, "hashlib", CountingHashlib)
    monkeypatch.setattr(verdicts, "COMPARE_FROM", 10)
    what = ("filter", "b", "http://b", "filter", True, 1)

    def hashes(memo, reply: bytes, nodes=()) -> int:
        before = len(hashed)
        memo.judge(what, 200, reply, list(nodes), lambda: Verdict(outcome=Outcome.OK, error="", findings=[], decisions=[]))
        return len(hashed) - before

    monkeypatch.setattr(verdicts, "COMPARED_BYTES", 400)  # so 100 bytes each at most
    memo = verdicts.VerdictMemo()
    replies = {size: b"x" * size for size in (100, 20, 30, 40, 50, 101, 60)}
    for reply in replies.values():
        assert hashes(memo, reply) == 1
    assert [hashes(memo, replies[size]) for size in (30, 40, 50, 60)] == [0, 0, 0, 0]  # the last four kept
    assert hashes(memo, replies[101]) == 1  # over a quarter of the bytes: never kept
    assert hashes(memo, replies[100]) == 1  # kept once, then the oldest of five
    assert hashes(memo, b"y" * 9) == 1  # under COMPARE_FROM: always hashed
    assert hashes(memo, b"y" * 9) == 1
    assert hashes(memo, b"z" * 20) == 1 and hashes(memo, b"z" * 20) == 0
    assert hashes(memo, b"z" * 20, nodes=["n0"]) == 1  # kept bytes, for other nodes: judged apart
    assert hashes(memo, b"z" * 20, nodes=["n0"]) == 0  # 20 + 66 bytes for its one name: kept
    assert [hashes(memo, replies[60], nodes=["n0"]) for _ in range(2)] == [1, 1]  # 60 + 66: not kept

    monkeypatch.setattr(verdicts, "COMPARED", 10)  # now the bytes bind: 400 in all
    memo = verdicts.VerdictMemo()
    for letter in b"abcde":
        assert hashes(memo, bytes([letter]) * 100) == 1
    assert [hashes(memo, bytes([letter]) * 100) for letter in b"edcba"] == [0, 0, 0, 0, 1]


def test_a_full_object_requests_envelope_is_read_once_while_recording_it(monkeypatch):
    from extproxy.protocol import envelope
    from extproxy.recording.attempts import AttemptTracker
    from extproxy.recording.rows import build_call
    from extproxy.recording.trace import Trace
    from tests.protocol.counting import count_decodes

    request = _with_pod_name(fixture_bytes("filter-request.nodecache-false.json"), "web-0")
    reply = fixture_bytes("filter-result.nodecache-false.json")
    trace = Trace(verb="filter", backend="b", url="http://b", started_at=1.0, finished_at=2.0, request_body=request,
                  status=200, response_body=reply, answered_status=200)
    rules = RedactionConfig()
    decoded = count_decodes(monkeypatch, envelope, "_raw_dict_decoder")
    build_call(trace, rules, AttemptTracker(), NodeDeduper(rules))
    assert decoded.count(len(request)) == 1  # for the pod and node names; the stored form reuses it
