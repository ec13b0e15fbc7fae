"""An object's identity (metadata's namespace, name, uid) read as kube-scheduler reads it.

kube-scheduler decodes a backend's reply with Go's encoding/json, which binds an object key to a
struct field by its json tag exactly, else case-insensitively (encoding/json/decode.go,
``(*decodeState).object``: ``fields.byExactName``, then ``fields.byFoldedName`` with
``foldName`` in fold.go; before Go 1.21, ``field.equalFold`` chosen by ``foldFunc``: ASCII case
plus the Kelvin sign and the long s). A key given twice is decoded into the same field twice:
ObjectMeta (a struct) is decoded into as it stands, so the later occurrence's fields overwrite
and the earlier one's others stay; a string's last value wins; ``null`` leaves a string or a
struct as it was (``literalStore``: "otherwise, ignore null for primitives/string"; a struct
is no pointer, map, slice or interface). A type error reads
``json: cannot unmarshal <JSON kind> into Go struct field <innermost struct>.<every field's json
name from the message down> of type <Go type>`` (``UnmarshalTypeError.Error``, and
``addErrorContext``, which joins ``errorContext.FieldStack``; decode_test.go's ``V.F2`` case).
No Go toolchain was at hand: these expectations are written from that source, not run."""
from __future__ import annotations

import pytest

from extproxy import protocol as p
from extproxy.protocol import ProtocolError

LONG_S = "\u017f".encode()

ITEMS = {
    "exact": (b'{"metadata":{"name":"node-1","namespace":"ns","uid":"u1"}}', ("ns", "node-1", "u1")),
    "capitalised": (b'{"Metadata":{"Name":"node-1"}}', ("", "node-1", "")),
    "upper-case field": (b'{"metadata":{"NAME":"node-1","NameSpace":"ns","UID":"u1"}}', ("ns", "node-1", "u1")),
    "upper-case object": (b'{"METADATA":{"name":"node-1"}}', ("", "node-1", "")),
    "escaped keys": (b'{"m\\u0065tadata":{"n\\u0041me":"node-1"}}', ("", "node-1", "")),
    "long s folds to s": (b'{"metadata":{"name' + LONG_S + b'pace":"ns","name":"n"}}', ("ns", "n", "")),
    "escaped long s": (b'{"metadata":{"name\\u017fpace":"ns"}}', ("ns", "", "")),
    "no fold": (b'{"metadata":{"name ":"x","names":"y"},"meta":{"name":"z"}}', ("", "", "")),
    "metadata twice merges": (b'{"metadata":{"name":"a","uid":"u"},"Metadata":{"name":"b"}}', ("", "b", "u")),
    "exact metadata twice merges": (b'{"metadata":{"name":"a","uid":"u"},"metadata":{"namespace":"ns"}}', ("ns", "a", "u")),
    "later null metadata": (b'{"metadata":{"name":"a"},"metadata":null}', ("", "a", "")),
    "earlier null metadata": (b'{"metadata":null,"metadata":{"name":"a"}}', ("", "a", "")),
    "later null name": (b'{"metadata":{"name":"a","name":null}}', ("", "a", "")),
    "later null Name": (b'{"metadata":{"name":"a","Name":null}}', ("", "a", "")),
    "name then Name": (b'{"metadata":{"name":"a","Name":"b"}}', ("", "b", "")),
    "Name then name": (b'{"metadata":{"Name":"b","name":"a"}}', ("", "a", "")),
    "spaced, twice": (b'{ "metadata" : { "name" : "a" } , "metadata" : { "uid" : "u" } }', ("", "a", "u")),
    "spaced, escaped twice": (b'{"metadata": {"name": "a"}, "m\\u0065tadata": {"uid": "u"}}', ("", "a", "u")),
    "spaced, name then null": (b'{"metadata": {"name": "a", "n\\u0061me": null}}', ("", "a", "")),
    "spaced, name then Name": (b'{"metadata": {"name": "a", "Name": "b"}}', ("", "b", "")),
    "spaced, plain": (b'{"kind": "Node", "metadata": {"name": "a", "labels": {"name": "x"}, "uid": "u"}}', ("", "a", "u")),
    "name a number": (b'{"metadata":{"name":5}}',
                      "json: cannot unmarshal number into Go struct field ObjectMeta.Nodes.items.metadata.name of type string"),
    "Name an array": (b'{"Metadata":{"NAME":[]}}',
                      "json: cannot unmarshal array into Go struct field ObjectMeta.Nodes.items.metadata.name of type string"),
    "namespace an object": (b'{"metadata":{"namespace":{}}}',
                            "json: cannot unmarshal object into Go struct field ObjectMeta.Nodes.items.metadata.namespace of type string"),
    "uid a bool": (b'{"metadata":{"uid":true}}',
                   "json: cannot unmarshal bool into Go struct field ObjectMeta.Nodes.items.metadata.uid of type types.UID"),
    "metadata a number": (b'{"metadata":5}',
                          "json: cannot unmarshal number into Go struct field Node.Nodes.items.metadata of type v1.ObjectMeta"),
    "a later bad name": (b'{"metadata":{"name":"a"},"metadata":{"name":5}}',
                         "json: cannot unmarshal number into Go struct field ObjectMeta.Nodes.items.metadata.name of type string"),
}


def filter_reply(item: bytes) -> bytes:
    return b'{"Nodes":{"metadata":{},"items":[' + item + b']},"NodeNames":null}'


def expected_name(expected):
    return expected if isinstance(expected, str) else [expected[1]]


def names(body: bytes, **how) -> list[str] | str:
    try:
        return p.decode_filter_result(body, names_only=True, **how).node_item_names
    except ProtocolError as exc:
        return str(exc)


@pytest.mark.parametrize("case", sorted(ITEMS))
def test_a_returned_node_is_named_as_go_names_it(case):
    item, expected = ITEMS[case]
    assert names(filter_reply(item), keep_items=True) == expected_name(expected)


@pytest.mark.parametrize("case", sorted(ITEMS))
def test_names_only_read_the_same(case):
    item, expected = ITEMS[case]
    assert names(filter_reply(item)) == expected_name(expected)


@pytest.mark.parametrize("case", sorted(ITEMS))
def test_known_objects_do_not_change_the_reading(case):
    item, expected = ITEMS[case]
    sent = ([ITEMS["exact"][0]], ["node-1"])
    assert names(filter_reply(ITEMS["exact"][0] + b"," + item), keep_items=True, known=sent) == (
        expected if isinstance(expected, str) else ["node-1", expected[1]])


@pytest.mark.parametrize("case", sorted(ITEMS))
def test_the_nodes_a_scheduler_sends_are_named_alike(case):
    item, expected = ITEMS[case]
    body = b'{"Pod":{},"Nodes":{"items":[' + item + b']}}'
    for keep_items in (True, False):
        try:
            got = p.read_extender_args(body, keep_items=keep_items).nodes.names
        except ProtocolError as exc:
            got = str(exc)
        assert got == expected_name(expected)


@pytest.mark.parametrize("case", sorted(ITEMS))
def test_a_pod_identity_is_read_alike(case):
    item, expected = ITEMS[case]
    try:
        got = p.read_extender_args(b'{"Pod":' + item + b',"NodeNames":[]}').pod_identity
    except ProtocolError as exc:
        got = str(exc)
    if isinstance(expected, str):  # the same error, at the Pod's place
        expected = expected.replace("Node.Nodes.items.", "Pod.Pod.").replace("ObjectMeta.Nodes.items.", "ObjectMeta.Pod.")
    assert got == expected


def test_a_large_object_with_other_keys_is_read_alike():
    labels = ",".join(f'"l{i}":"v{i}"' for i in range(50)).encode()
    item = (b'{"kind":"Node","apiVersion":"v1","metadata":{"labels":{' + labels + b'},"Name":"big",'
            b'"annotations":{"Name":"not this"}},"spec":{"name":"nor this"},"status":{"images":[{"names":["x"]}]}}')
    assert names(filter_reply(item), keep_items=True) == ["big"]


VICTIMS = {  # a preempt reply's victims: MetaPod{UID string} (no json tag: the key is "UID", any case)
    '[{"UID":"a"}]': ["a"],
    '[{"uid":"a"}]': ["a"],
    '[{"Uid":"a","uID":"b"}]': ["b"],
    '[{"UID":"a","uid":null}]': ["a"],
    '[{"\\u0055ID":"a"}]': ["a"],
    # map values add no field name; the element of Pods none either (addErrorContext's FieldStack)
    '[{"uid":5}]': "json: cannot unmarshal number into Go struct field MetaPod.NodeNameToMetaVictims.Pods.UID of type string",
}


@pytest.mark.parametrize("pods", sorted(VICTIMS))
def test_a_victims_uid_is_read_as_go_reads_it(pods):
    body = b'{"NodeNameToMetaVictims":{"node-1":{"Pods":' + pods.encode() + b',"NumPDBViolations":0}}}'
    try:
        got = p.decode_preemption_result(body).node_to_meta_victims["node-1"].pods
    except ProtocolError as exc:
        got = str(exc)
    assert got == VICTIMS[pods]


SPACED_LISTS = {  # whole lists as Python's json.dumps writes them (", " and ": "): Go's names
    "plain": (b'{"Nodes": {"metadata": {}, "items": [{"metadata": {"name": "a", "uid": "u"}}, '
              b'{"metadata": {"name": "b"}}, null, {"kind": "Node"}]}, "NodeNames": null}', ["a", "b", "", ""]),
    "a name twice": (b'{"Nodes": {"metadata": {}, "items": [{"metadata": {"name": "a"}}, '
                     b'{"metadata": {"name": "b", "name": "c"}}]}, "NodeNames": null}', ["a", "c"]),
    "metadata twice": (b'{"Nodes": {"items": [{"metadata": {"name": "a"}, "metadata": {"uid": "u"}}]}}', ["a"]),
    "items twice": (b'{"Nodes": {"items": [{"metadata": {"name": "a", "uid": "u"}}, {"metadata": {"name": "b"}}], '
                    b'"items": [{"metadata": {"namespace": "ns"}}]}}', ["a"]),
    "a name in a label": (b'{"Nodes": {"items": [{"metadata": {"labels": {"name": "x"}, "name": "a"}}]}}', ["a"]),
    "an escaped key": (b'{"Nodes": {"items": [{"metadata": {"name": "a", "n\\u0061me": "b"}}]}}', ["b"]),
}


@pytest.mark.parametrize("case", sorted(SPACED_LISTS))
def test_a_spaced_list_is_named_as_go_names_it(case):
    """A list with spaces is cleared for the one-pass read only when each identity key in its
    bytes is one the read decoded (identity._each_key_seen); a key given twice is read by Go's rules."""
    body, expected = SPACED_LISTS[case]
    assert names(body) == expected
    assert names(body, keep_items=True) == expected
