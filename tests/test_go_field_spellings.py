"""Pods and Nodes read as kube-scheduler's encoding/json reads them, where extproxy reads a field.

encoding/json binds a key to a struct field by its exact name, else case-insensitively
(decode.go, ``object``: "preferring an exact match but also accepting a case-insensitive
match"), and decodes a key given again into the same field; ``null`` sets a map, pointer or
slice to nil and leaves any other value as it was ("Unmarshal ... null ... has no effect on
the value" otherwise). A map's keys are data, matched exactly. So a Pod whose JSON says
``Spec`` or ``Metadata``, or a Node whose metadata says ``Labels``, is the same Pod or Node
to the scheduler; ``"labels":{...},"labels":null`` is a Node without labels.

extproxy built its dicts keeping each spelling as its own key, and read ``spec``,
``metadata``, ``labels`` by their exact names: the backend interested in the Pod's resources
was not asked, the policy's labels were not found. Each expectation
below is what the same request spelled as Go writes it gives, through the same real endpoint
(a real backend on loopback for the combined form; the built-in policy backend in process).
"""
from __future__ import annotations

import json

import pytest

from tests.conftest import fixture_json, pass_all
from tests.test_combined import backend, post as post_combined
from tests.test_policy_backend import POLICY_CONFIG, post as post_policy

FULL = "filter-request.nodecache-false.json"


def respell(obj: dict, path: tuple[str, ...], spelled: str) -> None:
    """The key at ``path`` renamed ``spelled`` (its place in the object kept)."""
    *parents, last = path
    for key in parents:
        obj = obj[key]
    items = [(spelled if key == last else key, value) for key, value in obj.items()]
    obj.clear()
    obj.update(items)


@pytest.mark.parametrize("path,spelled", [
    (("spec",), "Spec"),
    (("spec", "containers"), "CONTAINERS"),
    (("spec", "containers", 0, "resources"), "Resources"),
])
def test_a_backend_managing_the_pods_resources_is_asked_however_the_pod_spells_its_fields(
        backend_server, proxy, write_config, path, spelled):
    a = backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [
        backend("a", a, filterVerb="filter", nodeCacheCapable=True, managedResources=[{"name": "example.com/gpu"}]),
    ]}))
    request = fixture_json("filter-request.nodecache-true.json")
    pod = request["Pod"]
    if len(path) > 2:  # a container's field: respell inside the first container
        respell(pod["spec"]["containers"][0], path[3:], spelled)
    else:
        respell(pod, path, spelled)

    result = post_combined(server, "filter", json.dumps(request).encode()).json()

    # the scheduler's IsInterested reads pod.Spec.Containers[i].Resources: the GPU is asked for
    assert len(a.received) == 1 and result["Error"] == ""


def policy_filter(server, request: dict) -> dict:
    result = post_policy(server, "filter", json.dumps(request).encode()).json()
    return {"passed": sorted(n["metadata"]["name"] for n in (result["Nodes"] or {}).get("items") or ()),
            "failed": result["FailedNodes"], "unresolvable": result["FailedAndUnresolvableNodes"],
            "error": result["Error"]}


def test_the_policy_reads_node_fields_spelled_otherwise_as_go_does(proxy, write_config):
    server = proxy(write_config(POLICY_CONFIG))
    request = fixture_json(FULL)
    expected = policy_filter(server, request)  # the same Nodes as the scheduler writes them
    assert expected["passed"] and "node-04" in expected["unresolvable"]
    for node in request["Nodes"]["items"]:
        respell(node["metadata"], ("labels",), "Labels")
        respell(node["spec"], ("taints",), "Taints")
        respell(node["status"], ("allocatable",), "ALLOCATABLE")

    assert policy_filter(server, request) == expected


def test_a_null_labels_after_labels_leaves_a_node_without_labels(proxy, write_config):
    server = proxy(write_config(POLICY_CONFIG))
    request = fixture_json(FULL)
    node = request["Nodes"]["items"][0]
    name = node["metadata"]["name"]
    unlabelled = json.loads(json.dumps(request))
    unlabelled["Nodes"]["items"][0]["metadata"].pop("labels")
    expected = policy_filter(server, unlabelled)  # labels is a map: null sets it to nil
    assert name in expected["unresolvable"]
    body = json.dumps(request).encode()
    labels = json.dumps(node["metadata"]["labels"]).encode()
    body = body.replace(b'"labels": ' + labels, b'"labels": ' + labels + b', "labels": null', 1)

    result = post_policy(server, "filter", body).json()

    assert name in result["FailedAndUnresolvableNodes"] and result["FailedAndUnresolvableNodes"] == expected["unresolvable"]


def test_a_null_metadata_or_name_after_them_leaves_them_as_they_were(proxy, write_config):
    # ObjectMeta is a struct and name a string: null has no effect on either
    server = proxy(write_config(POLICY_CONFIG))
    request = fixture_json(FULL)
    expected = policy_filter(server, request)
    body = json.dumps(request).encode()
    for node in request["Nodes"]["items"]:
        meta = json.dumps(node["metadata"]).encode()
        body = body.replace(meta, meta + b', "metadata": null', 1)
        name = json.dumps(node["metadata"]["name"]).encode()
        body = body.replace(b'"name": ' + name, b'"name": ' + name + b', "name": null', 1)
    assert body.count(b'"metadata": null') == len(request["Nodes"]["items"])

    result = post_policy(server, "filter", body).json()

    assert sorted(n["metadata"]["name"] for n in result["Nodes"]["items"]) == expected["passed"]
    assert result["FailedAndUnresolvableNodes"] == expected["unresolvable"]


def test_label_keys_are_matched_exactly(proxy, write_config):
    # labels is a map[string]string: Go folds a struct's field names, never a map's keys
    server = proxy(write_config(POLICY_CONFIG))
    request = fixture_json(FULL)
    node = request["Nodes"]["items"][0]
    labels = node["metadata"]["labels"]
    labels["EXAMPLE.COM/GPU.PRESENT"] = labels.pop("example.com/gpu.present")

    result = post_policy(server, "filter", json.dumps(request).encode()).json()

    assert node["metadata"]["name"] in result["FailedAndUnresolvableNodes"]
