"""A backend's reply is its own text and can hold a credential anywhere: a text reply (not JSON)
carrying only a `Basic` credential, and a JSON reply's fields beyond Error and FailedNodes, are
stored redacted. End to end: a real proxy and backend, what is stored."""
from __future__ import annotations

import base64

from extproxy.recording.blobs import restore
from tests.conftest import fixture_bytes, reply
from tests.test_per_backend import FILTER_NAMES, config_for, only_call, post

SECRET = "hunter2SECRETVALUE"
BASIC = base64.b64encode(f"admin:{SECRET}".encode()).decode()


def stored_reply() -> bytes:
    from extproxy.models import Call

    return restore(bytes(Call.objects.get().response_body), lambda shas: {}).body


def test_a_text_reply_holding_a_basic_credential_is_stored_redacted(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"filter": reply(500, f"upstream refused: Basic {BASIC}", "text/plain")})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))

    answered = post(server, "/extender/gpu/filter", fixture_bytes(FILTER_NAMES))
    call = only_call(admin_client, server)

    assert answered.status_code == 500
    assert BASIC not in call["error"]  # the error text was already redacted: now the body is too
    kept = stored_reply()
    assert b"upstream refused: Basic" in kept and BASIC.encode() not in kept


def test_a_json_replys_fields_of_its_own_are_stored_redacted(backend_server, proxy, write_config, admin_client):
    """Error and FailedNodes were redacted, and a field the backend added was kept as written."""
    import json

    names = json.loads(fixture_bytes(FILTER_NAMES))["NodeNames"]
    written = {"NodeNames": names, "FailedNodes": {}, "Error": "", "Debug": f"token={SECRET} used",
               "Trace": {"steps": [f"auth Basic {BASIC}", "ok"]}}
    backend = backend_server({"filter": reply(200, written)})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))

    answered = post(server, "/extender/gpu/filter", fixture_bytes(FILTER_NAMES))
    only_call(admin_client, server)

    assert answered.json()["Debug"] == written["Debug"]  # the scheduler gets the reply as written
    kept = stored_reply()
    assert SECRET.encode() not in kept and BASIC.encode() not in kept
    assert json.loads(kept)["Debug"] == "token=[redacted] used"
    assert json.loads(kept)["NodeNames"] == names
