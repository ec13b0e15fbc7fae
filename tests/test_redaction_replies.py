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


ODD_NAMES = ["tokenserver01.corp", "basic-pool-abcdefgh", "gke-c-basic-1234abcd-x", "bearer-node-12345678"]


def test_names_that_start_like_a_credential_are_stored_as_they_came(backend_server, proxy, write_config, admin_client):
    """Node and pod names are the scheduler's words, which replay sends again: the credential
    pattern read `tokenserver01` as "token" and a secret, and the names were stored redacted."""
    import json

    from extproxy.models import Call

    request = json.loads(fixture_bytes(FILTER_NAMES))
    request["NodeNames"] = ODD_NAMES
    ranked = [{"Host": name, "Score": 1} for name in ODD_NAMES]
    backend = backend_server({"filter": reply(200, {"NodeNames": ODD_NAMES, "FailedNodes": {}, "Error": ""}),
                              "prioritize": reply(200, ranked), "bind": reply(200, {"Error": ""})})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True, prioritizeVerb="prioritize",
                                           bindVerb="bind", weight=1)))
    post(server, "/extender/gpu/filter", json.dumps(request).encode())
    post(server, "/extender/gpu/prioritize", json.dumps(request).encode())
    bind = {"PodName": "tokenizer-worker-7f9c", "PodNamespace": "basic-namespace-01", "PodUID": "u-1",
            "Node": "basic-pool-abcdefgh"}
    post(server, "/extender/gpu/bind", json.dumps(bind).encode())
    server.flush()

    def stored(verb: str, field: str) -> bytes:
        return restore(bytes(getattr(Call.objects.get(verb=verb), field)), lambda shas: {}).body

    assert json.loads(stored("filter", "request_body"))["NodeNames"] == ODD_NAMES
    assert json.loads(stored("filter", "response_body"))["NodeNames"] == ODD_NAMES
    assert json.loads(stored("prioritize", "response_body")) == ranked
    assert json.loads(stored("bind", "request_body")) == bind


def test_the_bound_on_other_fields_never_costs_the_protocols_own(backend_server, proxy, write_config, admin_client):
    """Past 1 MiB of a reply's fields of its own, its protocol fields are still stored and
    redacted, and do not count towards the bound: only the other fields give way."""
    import json

    from extproxy.models import Call

    many = [f"node-{i:07d}.example.internal" for i in range(40_000)]  # ~1.3 MB of names: no bound on them
    failed = {f"node-{i:07d}": f"token={SECRET}" for i in range(8_000)}  # ~300 kB, counted for nothing
    replies = [  # key order matters: the bound is met in the order the fields come
        {"Debug": "x" * (1 << 20), "NodeNames": many, "FailedNodes": {"n": f"token={SECRET}"}, "Error": ""},
        {"Debug": "x" * 900_000, "FailedNodes": failed, "Trace": "kept", "Error": ""},
    ]
    backend = backend_server({"filter": lambda handler, body: reply(200, replies.pop(0))(handler, body)})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    for _ in range(2):
        post(server, "/extender/gpu/filter", fixture_bytes(FILTER_NAMES))
    server.flush()
    first, second = (json.loads(restore(bytes(c.response_body), lambda shas: {}).body)
                     for c in Call.objects.order_by("started_at"))

    assert first["NodeNames"] == many and first["Error"] == "" and first["FailedNodes"] == {"n": "token=[redacted]"}
    assert first["Debug"].endswith("not kept: too long to redact]")
    assert second["Trace"] == "kept" and len(second["FailedNodes"]) == 8_000 and SECRET not in json.dumps(second)


KEYED = {  # a backend's own field, a secret under a key that names it: the patterns saw only the value
    "Debug": {"token": "abc", "Authorization": "Bearer x", "Cookie": "sid=1", "retries": 3,
              "creds": {"api_key": 12345, "scopes": ["read"]}, "session-id": ["s1", "s2"]},
    "Env": [{"name": "LOG_LEVEL", "value": "info"}],
}
KEYED_STORED = {
    "Debug": {"token": "[redacted]", "Authorization": "[redacted]", "Cookie": "[redacted]", "retries": 3,
              "creds": {"api_key": "[redacted]", "scopes": ["read"]}, "session-id": ["[redacted]", "[redacted]"]},
    "Env": [{"name": "LOG_LEVEL", "value": "[redacted]"}],  # an env entry as an object: as in text, with envValues
}


def _stored_reply_of(answer: dict) -> tuple[dict, list[str]]:
    import json
    import zlib

    from extproxy.config import RedactionConfig
    from extproxy.recording import compact_body
    from extproxy.recording.blobs import NodeDeduper

    stored = compact_body(json.dumps(answer).encode(), RedactionConfig(), NodeDeduper(RedactionConfig()))
    kept = restore(zlib.compress(stored), lambda shas: {})
    return json.loads(kept.body), kept.marks


def test_a_secret_under_a_key_that_names_it_is_stored_redacted():
    answer = {"NodeNames": ["node-01"], "FailedNodes": {}, "Error": "", **KEYED}
    kept, marks = _stored_reply_of(answer)

    assert {key: kept[key] for key in KEYED} == KEYED_STORED
    assert "Debug.token redacted" in marks and "Debug.creds.api_key redacted" in marks


def test_a_failed_nodes_key_is_a_node_name_not_a_secrets_name():
    """FailedNodes' keys are node names: `tokenserver01`'s reason is kept; a map a backend nests
    deeper is its own, and its keys are read."""
    answer = {"NodeNames": [], "FailedNodes": {"tokenserver01": "no room", "secret-pool-1": "taint"},
              "Error": "", "Debug": {"tokenserver01": {"password": "x"}}}
    kept, _ = _stored_reply_of(answer)

    assert kept["FailedNodes"] == answer["FailedNodes"]
    assert kept["Debug"] == {"tokenserver01": {"password": "[redacted]"}}


def test_manage_redact_applies_the_key_rule_to_replies_stored_before_it():
    """A reply stored before the rule (its Debug kept whole) is redacted by `manage.py redact`'s
    run as a new one is stored, and a second run changes nothing."""
    import json
    import zlib

    import msgspec

    from extproxy import bodyformat
    from extproxy.config import RedactionConfig
    from extproxy.recording.blobs import compress
    from extproxy.recording.redact_again import Bodies

    body = json.dumps({"NodeNames": ["node-01"], "FailedNodes": {"tokenserver01": "no room"}, "Error": "", **KEYED})
    old = compress(bodyformat.SPLICED_MARK + msgspec.msgpack.encode([[body.encode()], []]))
    bodies = Bodies(RedactionConfig(), {})

    new = bodies.body(old)
    kept = restore(new, lambda shas: {})
    assert {key: json.loads(kept.body)[key] for key in KEYED} == KEYED_STORED
    assert json.loads(kept.body)["FailedNodes"] == {"tokenserver01": "no room"}
    assert bodies.body(new) is None
    assert zlib.decompress(new)[:1] == bodyformat.SPLICED_MARK


def test_meta_victims_keys_are_node_names_too():
    """A preempt's NodeNameToMetaVictims (request and reply) is keyed by node name: a node named
    like a secret keeps its victims, in any spelling Go reads."""
    victims = {"tokenserver01": {"Pods": [{"UID": "uid-1"}], "NumPDBViolations": 1}}
    for key in ("NodeNameToMetaVictims", "nodeNameToMetaVictims"):
        kept, _ = _stored_reply_of({key: victims})
        assert kept[key] == victims
