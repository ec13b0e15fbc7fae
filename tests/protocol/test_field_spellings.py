"""Pod and Node dicts as encoding/json fills the structs: field names folded, null by type.

encoding/json (decode.go, ``object``) binds a key to a struct field by exact name, else
case-insensitively, and decodes every occurrence into that field; a map's keys are data and
stay as spelled. ``null`` sets a map, pointer or slice to nil and has no effect on anything
else (a struct, a string). Each expectation is written from those rules; the same object
spelled as Go writes it, where there is one, is the reference.
"""
from __future__ import annotations

import json

import pytest

from extproxy.protocol.kubefields import NODE, POD
from extproxy.protocol.merged import go_object


def read(text: str, shape=POD):
    return go_object(text.encode(), shape)


@pytest.mark.parametrize("spaced", [False, True])
def test_two_spellings_of_a_struct_field_are_one_field_merged_in_document_order(spaced):
    text = '{"metadata":{"name":"a","uid":"u1"},"Metadata":{"namespace":"x","NAME":"b"}}'
    if spaced:
        text = text.replace(":", ": ").replace(",", ", ")
    assert read(text) == {"metadata": {"name": "b", "uid": "u1", "namespace": "x"}}


def test_spellings_and_repeats_together():
    text = '{"metadata":{"name":"a"},"Metadata":{"uid":"u"},"metadata":{"Labels":{"k":"v"}}}'
    assert read(text) == {"metadata": {"name": "a", "uid": "u", "labels": {"k": "v"}}}


def test_a_maps_keys_are_never_folded():
    text = '{"metadata":{"labels":{"app":"a","App":"b"},"Labels":{"APP":"c"}}}'
    assert read(text) == {"metadata": {"labels": {"app": "a", "App": "b", "APP": "c"}}}


def test_null_by_the_fields_type():
    assert read('{"metadata":{"name":"a"},"metadata":null}') == {"metadata": {"name": "a"}}  # struct
    assert read('{"metadata":{"name":"a","name":null}}') == {"metadata": {"name": "a"}}  # string
    assert read('{"metadata":{"labels":{"a":"b"},"labels":null}}') == {"metadata": {"labels": None}}  # map
    assert read('{"metadata":{"labels":{"a":"b"},"Labels":null}}') == {"metadata": {"labels": None}}
    assert read('{"spec":{"affinity":{"nodeAffinity":{}},"affinity":null}}') == {"spec": {"affinity": None}}  # pointer
    # a map[string]string's null value is the string's zero value
    assert read('{"metadata":{"labels":{"a":null}}}') == {"metadata": {"labels": {"a": ""}}}
    assert read('{"metadata":{"labels":{"a":"x"},"labels":{"a":null}}}') == {"metadata": {"labels": {"a": ""}}}


def test_fields_inside_slices_of_structs_fold():
    usual = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"example.com/gpu": "1"}}}]}}
    text = json.dumps(usual).replace('"resources"', '"Resources"').replace('"containers"', '"CONTAINERS"')
    assert read(text) == usual
    node = {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}, "status": {"allocatable": {"cpu": "1"}}}
    assert read(json.dumps(node).replace('"effect"', '"Effect"').replace('"allocatable"', '"Allocatable"'), NODE) == node


def test_an_unknown_key_and_an_undescribed_inside_stay_as_spelled():
    text = '{"spec":{"affinity":{"NodeAffinity":{}}},"someFutureField":1}'
    assert read(text) == {"spec": {"affinity": {"NodeAffinity": {}}}, "someFutureField": 1}


def test_the_usual_object_reads_as_it_is():
    usual = json.loads(json.dumps({"metadata": {"name": "a", "labels": {"x": "y"}}, "spec": {"containers": [{"name": "c"}]}}))
    assert read(json.dumps(usual, separators=(",", ":"))) == usual
