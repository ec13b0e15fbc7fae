"""Tests for extproxy.protocol.decode and .gojson: Go encoding/json semantics of the extender v1 wire types."""

from __future__ import annotations

import pytest

from extproxy import protocol as p
from extproxy.protocol import (
    BindingArgs,
    BindingResult,
    ExtenderArgs,
    FilterResult,
    HostPriority,
    MetaVictims,
    PreemptionResult,
    ProtocolError,
)
from extproxy.protocol.gojson import _Fields
from tests.conftest import FIXTURES as FIX


def fx(name: str) -> bytes:
    return (FIX / name).read_bytes()


# ------------------------------------------------------------------ key spelling (§5 item 1)


def test_it_decodes_legacy_lowercase_filter_result_like_pascal_case():
    legacy = p.decode_filter_result(fx("filter-result.legacy-lowercase-keys.json"))
    pascal = p.decode_filter_result(fx("filter-result.nodecache-true.json"))
    assert legacy.node_names == pascal.node_names == ["node-01", "node-03"]
    assert legacy.failed_nodes == pascal.failed_nodes
    assert legacy.failed_and_unresolvable == {}
    assert legacy.nodes is None and legacy.error == ""


def test_it_decodes_legacy_lowercase_priorities_like_pascal_case():
    legacy = p.decode_host_priority_list(fx("prioritize-result.legacy-lowercase-keys.json"))
    pascal = p.decode_host_priority_list(fx("prioritize-result.json"))
    assert legacy == pascal == [HostPriority("node-01", 8), HostPriority("node-03", 3)]


@pytest.mark.parametrize(
    "body, expected",
    [
        (b'{"error":"x"}', "x"),
        (b'{"ERROR":"x"}', "x"),
        (b'{"eRRoR":"x"}', "x"),
        (b'{"Error":"a","error":"b"}', "b"),  # later key overwrites
        (b'{"error":"a","Error":"b"}', "b"),
        (b'{"Error":"a","error":"b","Error":"c"}', "c"),  # exact duplicates keep document order
        (b'{"Error":"a","Error":null}', "a"),  # null leaves a string unchanged
        (b'{"Errors":"x"}', ""),  # unknown key ignored
        (b'{"Er\\u0072or":"x"}', "x"),  # escaped key
    ],
)
def test_it_matches_envelope_keys_like_go(body, expected):
    assert p.decode_filter_result(body).error == expected
    assert p.decode_binding_result(body).error == expected


@pytest.mark.parametrize(
    "body, host, score",
    [
        (b'[{"host":"a","score":5}]', "a", 5),
        (b'[{"HOST":"a","SCORE":5}]', "a", 5),
        (b'[{"Host":"a","Score":5,"score":7}]', "a", 7),
        (b'[{"score":7,"Score":5, "Host":"a"}]', "a", 5),
        ('[{"Host":"a","\u017fcore":3}]'.encode(), "a", 3),  # long s folds to S (Go foldName)
        ('[{"Host":"a","\u212a":3}]'.encode(), "a", 0),  # Kelvin sign: folds, but no field "K"
        (b'[{"Host":"a","Score":null}]', "a", 0),
        (b'[{"Host":"a"}]', "a", 0),
        (b'[{"Host":"a","Score":-3}]', "a", -3),
        (b'[{"Host":"a","Score":-0}]', "a", 0),
        (b'[{"Host":"a","Score":9223372036854775807}]', "a", 2**63 - 1),
    ],
)
def test_it_decodes_host_priority_entries(body, host, score):
    assert p.decode_host_priority_list(body) == [HostPriority(host, score)]


def test_it_exact_match_wins_over_fold_for_field_lookup():
    f = _Fields(["Abc", "ABC"])
    assert f.match("ABC") == "ABC"
    assert f.match("Abc") == "Abc"
    assert f.match("abc") in ("Abc", "ABC")
    assert f.match("abd") is None


# ------------------------------------------------------------------ scores (§5 item 2)


@pytest.mark.parametrize(
    "literal, kind, text",
    [
        (b"5.0", "float-score", "number 5.0"),
        (b"5.5", "float-score", "number 5.5"),
        (b"5e0", "float-score", "number 5e0"),
        (b'"5"', "string-score", "string"),
        (b"true", "type", "bool"),
        (b"[5]", "type", "array"),
        (b"{}", "type", "object"),
        (b"9223372036854775808", "int-range", "number 9223372036854775808"),
    ],
)
def test_it_rejects_non_int64_scores(literal, kind, text):
    body = b'[{"Host":"node-01","Score":8},{"Host":"node-03","Score":' + literal + b"}]"
    with pytest.raises(ProtocolError) as ei:
        p.decode_host_priority_list(body)
    assert ei.value.kind == kind
    assert str(ei.value) == (
        f"json: cannot unmarshal {text} into Go struct field HostPriority.Score of type int64"
    )
    # lower-case keys take the exact (slow) path: same outcome
    with pytest.raises(ProtocolError) as ei2:
        p.decode_host_priority_list(body.replace(b'"Score"', b'"score"'))
    assert str(ei2.value) == str(ei.value)


def test_it_reports_the_go_style_message_for_5_5():
    with pytest.raises(ProtocolError, match=r"^json: cannot unmarshal number 5\.5 into Go struct "
                       r"field HostPriority\.Score of type int64$"):
        p.decode_host_priority_list(b'[{"Host":"a","Score":5.5}]')


@pytest.mark.parametrize(
    "body, expected",
    [
        (b"null", []),
        (b"[]", []),
        (b"[null]", [HostPriority("", 0)]),
        (b'[{"Host":"a","Score":1},{"Host":"a","Score":2}]', [HostPriority("a", 1), HostPriority("a", 2)]),
    ],
)
def test_it_decodes_host_priority_list_shapes(body, expected):
    assert p.decode_host_priority_list(body) == expected


@pytest.mark.parametrize("body", [b"{}", b'{"Host":"a","Score":1}', b'"x"', b"5", b"[1]", b'["a"]'])
def test_it_rejects_host_priority_list_type_mismatch(body):
    with pytest.raises(ProtocolError) as ei:
        p.decode_host_priority_list(body)
    assert ei.value.kind == "type"
    assert str(ei.value).startswith("json: cannot unmarshal ")


# ------------------------------------------------------------------ null vs [] vs absent (§5 item 3)


@pytest.mark.parametrize(
    "body, names, nodes",
    [
        (b"{}", None, None),
        (b'{"NodeNames":null,"Nodes":null}', None, None),
        (b'{"NodeNames":[]}', [], None),
        (b'{"Nodes":{"metadata":{},"items":[]}}', None, []),
        (b'{"Nodes":{"items":null}}', None, []),
        (b'{"Nodes":{}}', None, []),
        (b'{"NodeNames":["a",null]}', ["a", ""], None),
        (b'{"NodeNames":["a"],"nodenames":null}', None, None),  # later null resets a slice
        (b'{"nodes":{"ITEMS":[{"metadata":{"name":"x"}}]}}', None, [{"metadata": {"name": "x"}}]),
        (b'{"Nodes":{"items":[null]}}', None, [{}]),
    ],
)
def test_it_keeps_null_empty_and_absent_lists_apart(body, names, nodes):
    r = p.decode_filter_result(body)
    assert r.node_names == names
    assert r.nodes == nodes


def test_it_merges_maps_from_duplicated_keys():
    r = p.decode_filter_result(
        b'{"FailedNodes":{"a":"1","b":"x"},"failednodes":{"b":"2"},'
        b'"FailedAndUnresolvableNodes":{"c":"3"},"failedAndUnresolvableNodes":{"d":null}}'
    )
    assert r.failed_nodes == {"a": "1", "b": "2"}
    assert r.failed_and_unresolvable == {"c": "3", "d": ""}


def test_it_resets_a_map_on_a_later_null():
    r = p.decode_filter_result(b'{"FailedNodes":{"a":"1"},"FailedNodes":null}')
    assert r.failed_nodes == {}


# ------------------------------------------------------------------ body-level rules (§1, §5 item 7)


@pytest.mark.parametrize("body", [b"", b" ", b"\n\t\r "])
@pytest.mark.parametrize(
    "decode",
    [p.decode_filter_result, p.decode_host_priority_list, p.decode_binding_result,
     p.decode_preemption_result, p.decode_extender_args, p.decode_binding_args,
     p.decode_preemption_args, p.split_extender_args],
)
def test_it_fails_empty_bodies_with_eof(decode, body):
    with pytest.raises(ProtocolError) as ei:
        decode(body)
    assert (ei.value.kind, str(ei.value)) == ("eof", "EOF")


@pytest.mark.parametrize(
    "body",
    [b"{", b'{"Error":', b'{"Error":"x"', b'{"Error" "x"}', b"{Error:1}", b'{"Error":tru}', b"garbage",
     b'{"Error":"x",}', b"\xef\xbb\xbf{}"],
)
def test_it_fails_invalid_json(body):
    with pytest.raises(ProtocolError) as ei:
        p.decode_filter_result(body)
    assert ei.value.kind == "syntax"


@pytest.mark.parametrize(
    "body, error",
    [
        (b'{"Error":""} garbage', ""),
        (b'{"Error":"x"}{"Error":"y"}', "x"),
        (b'{"Error":"x"}}', "x"),
        (b'  {"Error":"x"}  \n', "x"),
        (b'{"Error":"x"} {', "x"),
        (b"null", ""),
        (b"null garbage", ""),
        (b"nullx", ""),
    ],
)
def test_it_reads_only_the_first_value(body, error):
    assert p.decode_filter_result(body).error == error


def test_it_gives_zero_values_for_a_null_body():
    assert p.decode_filter_result(b"null") == FilterResult(None, None, {}, {}, "")
    assert p.decode_binding_result(b"null") == BindingResult("")
    assert p.decode_binding_args(b"null") == BindingArgs("", "", "", "")
    assert p.decode_preemption_result(b"null") == PreemptionResult({})
    assert p.decode_extender_args(b"null") == ExtenderArgs({}, None, None)
    assert p.split_extender_args(b"null") == p.RawArgs({}, b"null", ("", "", ""), [], None)


@pytest.mark.parametrize(
    "decode, body, message",
    [
        (p.decode_filter_result, b"[]", "json: cannot unmarshal array into Go value of type v1.ExtenderFilterResult"),
        (p.decode_filter_result, b'"x"', "json: cannot unmarshal string into Go value of type v1.ExtenderFilterResult"),
        (p.decode_filter_result, b"5", "json: cannot unmarshal number into Go value of type v1.ExtenderFilterResult"),
        (p.decode_binding_result, b"true", "json: cannot unmarshal bool into Go value of type v1.ExtenderBindingResult"),
        (p.decode_preemption_result, b"[]", "json: cannot unmarshal array into Go value of type v1.ExtenderPreemptionResult"),
        (p.decode_extender_args, b"[]", "json: cannot unmarshal array into Go value of type v1.ExtenderArgs"),
        (p.split_extender_args, b"[]", "json: cannot unmarshal array into Go value of type v1.ExtenderArgs"),
        (p.decode_filter_result, b'{"Error":5}', "json: cannot unmarshal number into Go struct field ExtenderFilterResult.Error of type string"),
        (p.decode_filter_result, b'{"FailedNodes":{"a":5}}', "json: cannot unmarshal number into Go struct field ExtenderFilterResult.FailedNodes of type string"),
        (p.decode_filter_result, b'{"FailedNodes":["a"]}', "json: cannot unmarshal array into Go struct field ExtenderFilterResult.FailedNodes of type v1.FailedNodesMap"),
        (p.decode_filter_result, b'{"NodeNames":"a"}', "json: cannot unmarshal string into Go struct field ExtenderFilterResult.NodeNames of type []string"),
        (p.decode_filter_result, b'{"NodeNames":[1]}', "json: cannot unmarshal number into Go struct field ExtenderFilterResult.NodeNames of type string"),
        (p.decode_filter_result, b'{"Nodes":[]}', "json: cannot unmarshal array into Go struct field ExtenderFilterResult.Nodes of type v1.NodeList"),
        (p.decode_filter_result, b'{"Nodes":{"items":{}}}', "json: cannot unmarshal object into Go struct field NodeList.Nodes.items of type []v1.Node"),
        (p.decode_filter_result, b'{"Nodes":{"items":["n"]}}', "json: cannot unmarshal string into Go struct field NodeList.Nodes.items of type v1.Node"),
        (p.decode_extender_args, b'{"Pod":[]}', "json: cannot unmarshal array into Go struct field ExtenderArgs.Pod of type v1.Pod"),
        (p.decode_binding_args, b'{"PodUID":1}', "json: cannot unmarshal number into Go struct field ExtenderBindingArgs.PodUID of type types.UID"),
        (p.decode_preemption_result, b'{"NodeNameToMetaVictims":{"n":{"Pods":[{"UID":1}]}}}', "json: cannot unmarshal number into Go struct field MetaPod.NodeNameToMetaVictims.Pods.UID of type string"),
        (p.decode_preemption_result, b'{"NodeNameToMetaVictims":{"n":{"NumPDBViolations":1.0}}}', "json: cannot unmarshal number 1.0 into Go struct field MetaVictims.NodeNameToMetaVictims.NumPDBViolations of type int64"),
        (p.decode_preemption_result, b'{"NodeNameToMetaVictims":{"n":[]}}', "json: cannot unmarshal array into Go struct field ExtenderPreemptionResult.NodeNameToMetaVictims of type v1.MetaVictims"),
        (p.decode_preemption_result, b'{"NodeNameToMetaVictims":[]}', "json: cannot unmarshal array into Go struct field ExtenderPreemptionResult.NodeNameToMetaVictims of type map[string]*v1.MetaVictims"),
    ],
)
def test_it_rejects_type_mismatches(decode, body, message):
    with pytest.raises(ProtocolError) as ei:
        decode(body)
    assert str(ei.value) == message
    assert isinstance(ei.value, ValueError)


# ------------------------------------------------------------------ preempt result (§5 item 6)


@pytest.mark.parametrize(
    "body, expected",
    [
        (b'{"NodeNameToMetaVictims":{"n":{"Pods":[{"UID":"u"}],"NumPDBViolations":2}}}',
         {"n": MetaVictims(["u"], 2)}),
        (b'{"nodeNameToMetaVictims":{"n":{"pods":[{"uid":"u"}],"numPDBViolations":2}}}',
         {"n": MetaVictims(["u"], 2)}),
        (b'{"NodeNameToMetaVictims":{"n":null}}', {"n": None}),
        (b'{"NodeNameToMetaVictims":{"n":{"Pods":null}}}', {"n": MetaVictims([], 0)}),
        (b'{"NodeNameToMetaVictims":{"n":{"Pods":[null]}}}', {"n": MetaVictims([""], 0)}),
        (b'{"NodeNameToVictims":{"n":{"Pods":[{}]}}}', {}),  # wrong form: empty map
        (b'{"NodeNameToMetaVictims":null}', {}),
        (b'{"NodeNameToMetaVictims":{"a":{"Pods":[{"UID":"1"}]}},"nodenametometavictims":{"b":{"Pods":[{"UID":"2"}]}}}',
         {"a": MetaVictims(["1"], 0), "b": MetaVictims(["2"], 0)}),
    ],
)
def test_it_decodes_preemption_results(body, expected):
    assert p.decode_preemption_result(body).node_to_meta_victims == expected


@pytest.mark.parametrize(
    "keys, field, expected",
    [
        (["Pod", "Nodes"], "Pod", "Pod"),
        (["pod"], "Pod", "pod"),
        (["Pod", "POD"], "Pod", "POD"),  # a later key overwrites: Go keeps the last one's value
        (["POD", "Pod"], "Pod", "Pod"),
        (["\u017fpec"], "Spec", "\u017fpec"),  # long s folds to S, as in Go's foldName
        (["nodenametometavictims"], "NodeNameToVictims", None),
        ([], "Pod", None),
    ],
)
def test_it_finds_the_key_go_binds_to_a_field(keys, field, expected):
    assert p.go_key(keys, field) == expected
