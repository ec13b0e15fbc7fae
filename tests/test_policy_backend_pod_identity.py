"""The built-in policy backend binds the pod the scheduler named, however its JSON spells it.

A bind through the Kubernetes API is allowed only for a pod the backend saw in a filter or
prioritize call, by its uid, namespace and name. The policy backend took them from the Pod
dict, which kept ``Metadata`` (or ``METADATA``) as a key of its own and was read only as
``metadata``: no pod was named, and the bind the scheduler asks for after its filter was refused
as "not seen". kube-scheduler's encoding/json binds the key to the field case-insensitively
(decode.go, ``object``), as the combined form reads the identity: from the request's bytes
(protocol/identity.py). Real endpoint, a real API server on loopback.
"""
from __future__ import annotations

import json

import pytest

from tests.conftest import fixture_bytes, fixture_json
from tests.test_go_field_spellings import FULL, respell
from tests.test_policy_backend import POLICY_CONFIG, api_server, post  # noqa: F401 (api_server: a fixture)


@pytest.mark.parametrize("spelled", ["Metadata", "METADATA"])
def test_the_policy_binds_a_pod_named_as_go_reads_it(proxy, write_config, api_server, spelled):
    api = api_server()
    server = proxy(write_config(POLICY_CONFIG))
    request = fixture_json(FULL)
    respell(request["Pod"], ("metadata",), spelled)
    bind = fixture_json("bind-request.json")
    assert bind["PodUID"] == request["Pod"][spelled]["uid"]
    passed = post(server, "filter", json.dumps(request).encode()).json()["Nodes"]["items"]
    assert bind["Node"] in [n["metadata"]["name"] for n in passed]

    response = post(server, "bind", fixture_bytes("bind-request.json"))

    assert response.json() == {"Error": ""}
    assert [path for path, _ in api.received] == [
        f"/api/v1/namespaces/{bind['PodNamespace']}/pods/{bind['PodName']}/binding"]
