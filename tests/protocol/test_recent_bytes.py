"""Names read out of NodeLists seen before: taken from memory only for the very same bytes,
handed out as copies, and the memory bounded (protocol.RecentBytes)."""
from __future__ import annotations

import json

import pytest

from extproxy import protocol
from extproxy.protocol import identity
from tests.conftest import fixture_bytes
from tests.protocol.counting import count_decodes


def body_with(pod_name: str, zone: str = "a") -> bytes:
    data = json.loads(fixture_bytes("filter-request.nodecache-false.json"))
    data["Pod"]["metadata"]["name"] = pod_name
    data["Nodes"]["items"][2]["metadata"]["name"] = f"node-in-{zone}"
    return json.dumps(data, separators=(",", ":")).encode()


def test_a_node_list_read_before_gives_its_names_again_without_being_read_again(monkeypatch):
    recent = protocol.RecentBytes()
    first = protocol.read_extender_args(body_with("web-0"), keep_items=False, recent=recent)
    fresh = protocol.read_extender_args(body_with("x"), keep_items=False).nodes

    reads = count_decodes(monkeypatch, identity, "_plain_node_list")
    again = protocol.read_extender_args(body_with("web-1"), keep_items=False, recent=recent)
    assert not reads  # the list's names came from memory
    assert again.pod_identity[1] == "web-1" and again.nodes is not None and first.nodes is not None
    assert fresh is not None and again.nodes.names == first.nodes.names == fresh.names

    again.nodes.names.append("changed by the caller")  # a copy: the memory is not changed
    other = protocol.read_extender_args(body_with("web-2", zone="b"), keep_items=False, recent=recent)
    assert len(reads) == 1 and other.nodes is not None and "node-in-b" in other.nodes.names  # other bytes: read
    third = protocol.read_extender_args(body_with("web-3"), keep_items=False, recent=recent)
    assert third.nodes is not None and third.nodes.names == fresh.names and len(reads) == 1


def test_a_bad_node_list_is_refused_as_without_the_memory():
    data = json.loads(fixture_bytes("filter-request.nodecache-false.json"))
    data["Nodes"] = {"items": 5}
    body = json.dumps(data).encode()
    with pytest.raises(protocol.ProtocolError) as without:
        protocol.read_extender_args(body, keep_items=False)
    with pytest.raises(protocol.ProtocolError) as with_memory:
        protocol.read_extender_args(body, keep_items=False, recent=protocol.RecentBytes())
    assert str(with_memory.value) == str(without.value)


def test_the_memory_keeps_the_lists_used_last_within_its_count_and_bytes():
    recent = protocol.RecentBytes(keep=3, max_bytes=400)
    for name in (b"a", b"b", b"c"):
        recent.keep(name * 10, name, 100)
    assert recent.find(b"a" * 10) == b"a"  # used last now: b is the oldest
    recent.keep(b"d" * 10, b"d", 100)  # four would be one too many
    assert recent.find(b"b" * 10) is None and recent.find(b"c" * 10) == b"c"
    recent.keep(b"e" * 10, b"e", 101)  # over a quarter of the bytes: not kept
    assert recent.find(b"e" * 10) is None
    big = protocol.RecentBytes(keep=10, max_bytes=400)
    for name in (b"a", b"b", b"c", b"d", b"e"):
        big.keep(name * 10, name, 100)
    assert big.find(b"a" * 10) is None and big.find(b"b" * 10) == b"b"  # 400 bytes at most in all
    assert big.find(b"f" * 10) is None and big.find(b"b" * 9) is None


def test_the_same_bytes_are_found_only_with_what_matches():
    recent = protocol.RecentBytes(keep=3, max_bytes=400)
    recent.keep(b"reply", ("backend-a", "key-a"), 10)
    recent.keep(b"reply", ("backend-b", "key-b"), 10)
    assert recent.find(b"reply", lambda made: made[0] == "backend-a") == ("backend-a", "key-a")
    assert recent.find(b"reply", lambda made: made[0] == "backend-b") == ("backend-b", "key-b")
    assert recent.find(b"reply", lambda made: made[0] == "backend-c") is None
    assert recent.find(b"other", lambda made: True) is None
