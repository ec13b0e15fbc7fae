"""The shadow process keeps examples of a shadow's differing answers (shadow.json, the API, the
page): a shadow that echoes a secret of the request in a form no pattern knows (a Go map, a JSON
fragment with escapes) has it removed there as the recorder removes it from a recorded call.
End to end: the serving process, the recorder and the shadow process, real backends on loopback."""
from __future__ import annotations

import json

import pytest

from extproxy.redaction import REDACTED
from tests.conftest import fixture_bytes, pass_all
from tests.test_combined import failing
from tests.test_replay import NAMES
from tests.test_shadow import compared, count, login, shadowed, with_shadow  # noqa: F401 (shadowed: the fixture)

pytestmark = pytest.mark.timeout(300)

SECRET = "hunter2secret"
ESCAPED = "\\u0068unter2secret"  # as a backend quoting JSON with escapes writes it


def test_a_shadows_examples_are_kept_without_the_values_redacted_from_the_request(backend_server, shadowed):
    request = json.loads(fixture_bytes(NAMES))
    request["Pod"]["spec"]["containers"][0]["env"] = [{"name": "DB_PASSWORD", "value": SECRET}]
    primary = backend_server({"filter": pass_all})
    shadow = backend_server({"filter": failing({"gpu-node-1": f"config map[DB:{SECRET}] refused",
                                                "gpu-node-2": 'said {"pw": "' + ESCAPED + '"}'})})
    inst = shadowed(with_shadow(primary.url, shadow.url)).start_all()

    answered = inst.post("/extender/gpu/filter", json.dumps(request).encode())
    got = inst.wait_for(lambda f: compared(f) >= 1)

    assert json.loads(answered.content)["FailedNodes"] == {}  # the primary's answer
    assert count(got, "different") == 1
    session = login(inst)
    row = session.get(inst.url + "/api/shadows/", timeout=10).json()["results"][0]
    after = {n["node"]: n["after"] for n in row["examples"][0]["nodes"]}
    assert after == {"gpu-node-1": f"config map[DB:{REDACTED}] refused", "gpu-node-2": 'said {"pw": "' + REDACTED + '"}'}
    kept = json.dumps(row) + session.get(inst.url + "/shadows/", timeout=10).text + (inst.spool / "shadow.json").read_text()
    assert SECRET not in kept and "u0068unter2secret" not in kept
