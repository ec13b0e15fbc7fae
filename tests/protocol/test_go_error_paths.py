"""A reply's type errors, worded as kube-scheduler's decoder words them.

Go's encoding/json (decode.go) names a field by the whole path from the message down:
``(*decodeState).object`` appends each matched field's name to ``errorContext.FieldStack`` and
sets ``errorContext.Struct`` to the struct being decoded (a map's keys and an array's elements
add nothing), and ``saveError`` passes the error through ``addErrorContext``, which sets
``UnmarshalTypeError.Struct`` to ``Struct.Name()`` and ``Field`` to the stack joined by ".";
``UnmarshalTypeError.Error`` then says ``Go struct field <Struct>.<Field> of type <Type>``. The
type is the Go type after ``indirect`` took away the pointers (``literalStore``, ``array`` and
``object`` use the dereferenced value), spelled as reflect spells it: the field types are those
of k8s.io/kube-scheduler/extender/v1 types.go (``PodUID types.UID``, ``FailedNodes
FailedNodesMap``, ``Pods []*v1.Pod``, ``Pods []*MetaPod``). A value in a map or an element of a
slice that is of the wrong kind is reported with the context of the field that holds the map or
the slice, not as a bare ``Go value``. No Go toolchain was at hand: these are written from that
source, not run.
"""
from __future__ import annotations

import pytest

from extproxy import protocol as p
from extproxy.protocol import ProtocolError

_U = "json: cannot unmarshal "

CASES = [
    # 1. a NodeList's fields: Struct NodeList, FieldStack [Nodes, items]
    ("filter", b'{"Nodes":{"items":{}}}', _U + "object into Go struct field NodeList.Nodes.items of type []v1.Node"),
    ("filter", b'{"Nodes":{"items":["n"]}}', _U + "string into Go struct field NodeList.Nodes.items of type v1.Node"),
    ("filter", b'{"Nodes":{"Items":[5]}}', _U + "number into Go struct field NodeList.Nodes.items of type v1.Node"),
    ("filter", b'{"Nodes":{"metadata":5}}', _U + "number into Go struct field NodeList.Nodes.metadata of type v1.ListMeta"),
    ("filter", b'{"Nodes":{"items":[],"metadata":[]}}',
     _U + "array into Go struct field NodeList.Nodes.metadata of type v1.ListMeta"),
    ("args", b'{"Nodes":{"items":[true]}}', _U + "bool into Go struct field NodeList.Nodes.items of type v1.Node"),
    ("args names", b'{"Nodes":{"items":[true]}}', _U + "bool into Go struct field NodeList.Nodes.items of type v1.Node"),
    ("args", b'{"Nodes":{"items":"x"}}', _U + "string into Go struct field NodeList.Nodes.items of type []v1.Node"),
    # 2. victims: Struct MetaVictims/Victims, FieldStack [NodeNameTo..., field]
    ("preempt result", b'{"NodeNameToMetaVictims":{"n":{"NumPDBViolations":1.0}}}',
     _U + "number 1.0 into Go struct field MetaVictims.NodeNameToMetaVictims.NumPDBViolations of type int64"),
    ("preempt result", b'{"NodeNameToMetaVictims":{"n":{"NumPDBViolations":"1"}}}',
     _U + "string into Go struct field MetaVictims.NodeNameToMetaVictims.NumPDBViolations of type int64"),
    ("preempt result", b'{"NodeNameToMetaVictims":{"n":{"Pods":{}}}}',
     _U + "object into Go struct field MetaVictims.NodeNameToMetaVictims.Pods of type []*v1.MetaPod"),
    ("preempt result", b'{"NodeNameToMetaVictims":{"n":{"Pods":[5]}}}',
     _U + "number into Go struct field MetaVictims.NodeNameToMetaVictims.Pods of type v1.MetaPod"),
    ("preempt result", b'{"NodeNameToMetaVictims":{"n":[]}}',
     _U + "array into Go struct field ExtenderPreemptionResult.NodeNameToMetaVictims of type v1.MetaVictims"),
    ("preempt args", b'{"NodeNameToMetaVictims":{"n":{"NumPDBViolations":true}}}',
     _U + "bool into Go struct field MetaVictims.NodeNameToMetaVictims.NumPDBViolations of type int64"),
    ("preempt args", b'{"NodeNameToVictims":{"n":5}}',
     _U + "number into Go struct field ExtenderPreemptionArgs.NodeNameToVictims of type v1.Victims"),
    ("preempt args", b'{"NodeNameToVictims":{"n":{"NumPDBViolations":1.5}}}',
     _U + "number 1.5 into Go struct field Victims.NodeNameToVictims.NumPDBViolations of type int64"),
    ("preempt args", b'{"NodeNameToVictims":{"n":{"Pods":{}}}}',
     _U + "object into Go struct field Victims.NodeNameToVictims.Pods of type []*v1.Pod"),
    ("preempt args", b'{"NodeNameToVictims":{"n":{"Pods":["p"]}}}',
     _U + "string into Go struct field Victims.NodeNameToVictims.Pods of type v1.Pod"),
    # 3. the fields' own Go types
    ("bind args", b'{"PodUID":1}', _U + "number into Go struct field ExtenderBindingArgs.PodUID of type types.UID"),
    ("bind args", b'{"poduid":[]}', _U + "array into Go struct field ExtenderBindingArgs.PodUID of type types.UID"),
    ("bind args", b'{"PodName":1}', _U + "number into Go struct field ExtenderBindingArgs.PodName of type string"),
    ("filter", b'{"FailedNodes":["a"]}', _U + "array into Go struct field ExtenderFilterResult.FailedNodes of type v1.FailedNodesMap"),
    ("filter", b'{"FailedAndUnresolvableNodes":5}',
     _U + "number into Go struct field ExtenderFilterResult.FailedAndUnresolvableNodes of type v1.FailedNodesMap"),
    ("filter", b'{"FailedNodes":{"a":5}}', _U + "number into Go struct field ExtenderFilterResult.FailedNodes of type string"),
    ("prioritize", b'[{"Score":"1"}]', _U + "string into Go struct field HostPriority.Score of type int64"),
    ("prioritize", b'[{"Host":"a"},5]', _U + "number into Go value of type v1.HostPriority"),
]

READERS = {
    "filter": lambda body: p.decode_filter_result(body),
    "args": lambda body: p.read_extender_args(body),
    "args names": lambda body: p.read_extender_args(body, keep_items=False),
    "preempt result": p.decode_preemption_result,
    "preempt args": p.decode_preemption_args,
    "bind args": p.decode_binding_args,
    "prioritize": p.decode_host_priority_list,
}


@pytest.mark.parametrize("reader, body, message", CASES, ids=[f"{c[0]}: {c[1].decode()}" for c in CASES])
def test_a_type_error_names_the_field_as_go_does(reader, body, message):
    with pytest.raises(ProtocolError) as caught:
        READERS[reader](body)
    assert str(caught.value) == message


# Go keeps the first type error it meets, decoding in document order (saveError keeps the first;
# array decodes element 0 whole before element 1; object decodes its pairs in turn).
FIRST = [
    ("filter", b'{"Nodes":{"items":[{"metadata":{"name":5}},7]}}',
     _U + "number into Go struct field ObjectMeta.Nodes.items.metadata.name of type string"),
    ("args", b'{"Nodes":{"items":[{"metadata":{"uid":true}},"x"]}}',
     _U + "bool into Go struct field ObjectMeta.Nodes.items.metadata.uid of type types.UID"),
    ("args", b'{"Pod":{"metadata":{"name":5}},"Nodes":{"items":[7]}}',
     _U + "number into Go struct field ObjectMeta.Pod.metadata.name of type string"),
    ("args", b'{"Pod":{"metadata":{"name":5}},"Pod":{}}',
     _U + "number into Go struct field ObjectMeta.Pod.metadata.name of type string"),
]


@pytest.mark.parametrize("reader, body, message", FIRST, ids=[f"{c[0]}: {c[1].decode()}" for c in FIRST])
def test_the_first_type_error_in_document_order_is_the_one_named(reader, body, message):
    with pytest.raises(ProtocolError) as caught:
        READERS[reader](body)
    assert str(caught.value) == message
