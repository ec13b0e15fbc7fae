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
