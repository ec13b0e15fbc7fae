"""Redaction by pattern: env names, container args, annotations, labels, and error texts, in
unit tables and end to end (a real proxy and backend; what is stored and what the API shows)."""
from __future__ import annotations

import asyncio

import json
import zlib

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from extproxy.config import RedactionConfig
from extproxy.recording import LIVE_GROUP
from extproxy.recording.blobs import restore
from extproxy.redaction import RAW_MARK_TEXT, REDACTED, redact_args, redact_object, redact_raw, redact_text
from tests.conftest import fixture_bytes, pass_all, reply
from tests.test_per_backend import FILTER_NAMES, config_for, only_call, post

RULES = RedactionConfig()


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--db-password=hunter2", "--port=5432"], [f"--db-password={REDACTED}", "--port=5432"]),
        (["--token", "abc123", "--verbose"], ["--token", REDACTED, "--verbose"]),
        (["-api-key", "k"], ["-api-key", REDACTED]),
        (["--token", "--next-flag"], ["--token", "--next-flag"]),  # a flag, not a value
        (["sh", "-c", "export DB_PASSWORD=hunter2 && run"], ["sh", "-c", f"export DB_PASSWORD={REDACTED} && run"]),
        (["serve", "--listen=:8080"], ["serve", "--listen=:8080"]),
        (["--dsn", "postgres://app:pw@db/x"], ["--dsn", REDACTED]),
        (["--url=postgres://app:pw@db/x"], [f"--url=postgres://app:{REDACTED}@db/x"]),
    ],
)
def test_it_redacts_secret_values_in_container_args(args, expected):
    assert redact_args(args, RULES) == expected


@pytest.mark.parametrize(
    "text, secret",
    [
        ("backend said: --db-password=hunter2 rejected", "hunter2"),
        ('{"env":[{"name":"PLAIN","value":"hunter2"}]}', "hunter2"),  # envValues: every env value
        ('{"vault.example.com/token": "s.hunter2"}', "s.hunter2"),
        ("Authorization: Bearer abcdefghij0123", "abcdefghij0123"),
        ("curl -H 'Authorization: Token 0123456789abcdef'", "0123456789abcdef"),
        ("connect postgresql://app:hunter2@db:5432/x failed", "hunter2"),
        ("GET /ws/live/?token=deadbeef00&x=1", "deadbeef00"),
        ("X-Api-Key: hunter2", "hunter2"),
    ],
)
def test_it_redacts_secrets_in_free_text(text, secret):
    redacted = redact_text(text, RULES)
    assert secret not in redacted and REDACTED in redacted


@pytest.mark.parametrize(
    "text",
    ["password=hunter2", "token: Bearer abcdefghij0123", "X-Api-Key: hunter2 and more", "--db-password=hunter2,x",
     "connect postgresql://app:hunter2@db:5432/x", '{"name":"PLAIN","value":"hunter2"}', "'token': 'hunter2'",
     "Authorization: Token 0123456789abcdef", "Bearer abcdefghij0123", "a token=[hunter2]"],
)
def test_redacting_again_changes_nothing(text):
    """`manage.py redact` runs the rules over what they redacted before: the result must stand."""
    once = redact_text(text, RULES)
    assert "hunter2" not in once and "0123" not in once
    assert redact_text(once, RULES) == once


def test_it_leaves_ordinary_text_alone():
    text = 'extproxy: backend gpu: node-3 failed: Insufficient nvidia.com/gpu (want 2, have 1); key=zone'
    assert redact_text(text, RULES) == text


def test_it_redacts_env_annotations_and_labels_by_pattern():
    rules = RedactionConfig(env_values=False, redact_labels=("owner",))
    pod = {
        "metadata": {
            "annotations": {"vault.example.com/token": "s.x", "team": "ml", "backup-url": "s3://k:hunter2@bucket"},
            "labels": {"app": "trainer", "api-key-hash": "abc", "owner": "alice"},
        },
        "spec": {"containers": [{"env": [{"name": "LOG_LEVEL", "value": "debug"}, {"name": "DB_PASSWORD", "value": "x"}],
                                 "args": ["--client-secret=x"]}],
                 "initContainers": [{"command": ["init", "--token", "x"]}]},
    }

    redact_object(pod, rules)

    assert pod["metadata"]["annotations"] == {"vault.example.com/token": REDACTED, "team": "ml",
                                              "backup-url": f"s3://k:{REDACTED}@bucket"}
    assert pod["metadata"]["labels"] == {"app": "trainer", "api-key-hash": REDACTED, "owner": REDACTED}
    assert pod["spec"]["containers"][0]["env"] == [{"name": "LOG_LEVEL", "value": "debug"},
                                                   {"name": "DB_PASSWORD", "value": REDACTED}]
    assert pod["spec"]["containers"][0]["args"] == [f"--client-secret={REDACTED}"]
    assert pod["spec"]["initContainers"][0]["command"] == ["init", "--token", REDACTED]


def test_it_takes_name_patterns_from_the_configuration_file(write_config):
    from extproxy.config import ConfigError, load_config

    config = load_config(write_config({"backends": [{"name": "b", "policy": "p"}], "policies": {"p": {"rules": []}},
                                       "redaction": {"namePatterns": ["^x-internal-"]}}))
    assert config.redaction.name_patterns == ("^x-internal-",)
    with pytest.raises(ConfigError, match=r"redaction\.namePatterns\[0\].*regular expression"):
        load_config(write_config({"backends": [{"name": "b", "policy": "p"}], "policies": {"p": {"rules": []}},
                                  "redaction": {"namePatterns": ["("]}}, name="bad.yaml"))


def secret_pod_request() -> bytes:
    request = json.loads(fixture_bytes(FILTER_NAMES))
    pod = request["Pod"]
    pod["metadata"].setdefault("annotations", {})["vault.example.com/token"] = "s.hunter2-annotation"
    pod["metadata"].setdefault("labels", {})["session-token"] = "hunter2-label"
    pod["spec"]["containers"][0]["args"] = ["--db-password=hunter2-arg", "--token", "hunter2-next-arg"]
    return json.dumps(request).encode()


def test_it_stores_a_pod_with_args_annotations_and_labels_redacted(backend_server, proxy, write_config, admin_client):
    from extproxy.models import Call
    from extproxy.recorder import decompress

    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))

    assert post(server, "/extender/gpu/filter", secret_pod_request()).status_code == 200
    only_call(admin_client, server)

    stored = decompress(bytes(Call.objects.get().request_body))
    assert b"hunter2" not in stored
    assert b"--db-password=[redacted]" in stored and b"vault.example.com/token" in stored
    assert b"hunter2" in backend.received[0][1]  # the backend itself got the pod as it was



@pytest.mark.parametrize("first_key", ["Pod", "pod"])
def test_a_pod_given_twice_is_not_stored_unredacted(first_key, backend_server, proxy, write_config, admin_client):
    """Go reads the last of a repeated field (in any case); the one before it must not reach
    the store as it came, secrets and all."""
    from extproxy.models import Call
    from extproxy.recorder import decompress

    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    request = json.loads(secret_pod_request())
    compact = json.dumps(request, separators=(",", ":")).encode()  # {"Pod":...,"NodeNames":[...]}
    body = b'{"' + first_key.encode() + b'":' + json.dumps(request["Pod"]).encode() + b"," + compact[1:]

    assert post(server, "/extender/gpu/filter", body).status_code == 200
    only_call(admin_client, server)

    stored = decompress(bytes(Call.objects.get().request_body))
    assert b"hunter2" not in stored
    assert b"hunter2" in backend.received[0][1]

def test_it_redacts_a_backends_error_body_before_storing_and_streaming(backend_server, proxy, write_config, admin_client):
    from extproxy.models import Call

    echo = 'invalid pod: env DB_PASSWORD=hunter2-env, {"name":"API_TOKEN","value":"hunter2-json"}, Bearer hunter2-bearer-xyz'
    backend = backend_server({"filter": reply(500, echo, "text/plain")})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    # What the live stream carries, listened to on one event loop from before the call to after
    # it (the Redis layer keeps a channel per loop, so the three steps cannot be separate loops).
    layer = get_channel_layer()

    async def listen_around_the_call():
        channel = await layer.new_channel()
        await layer.group_add(LIVE_GROUP, channel)
        answered = await asyncio.to_thread(post, server, "/extender/gpu/filter", fixture_bytes(FILTER_NAMES))
        stored = await asyncio.to_thread(only_call, admin_client, server)
        message = await asyncio.wait_for(layer.receive(channel), timeout=60)
        return answered, stored, message["calls"]

    answered, call, published = async_to_sync(listen_around_the_call)()
    assert answered.status_code == 500

    assert call["outcome"] == "error" and "invalid pod" in call["error"] and "hunter2" not in call["error"]
    assert "hunter2" not in Call.objects.get().error
    assert published and all("hunter2" not in json.dumps(summary) for summary in published)
    stored = restore(bytes(Call.objects.get().response_body), lambda shas: {})  # not JSON: redacted by pattern
    assert b"invalid pod" in stored.body and b"hunter2" not in stored.body and not stored.exact


SECRET_REASONS = {
    "node-02": "env DB_PASSWORD=hunter2-reason is not allowed here",
    "node-03": "Insufficient nvidia.com/gpu",
    "node-04": "image pull needs Bearer hunter2-bearer-reason",
}


@pytest.mark.parametrize("form", ["per-backend", "combined"])
def test_a_backends_reasons_and_error_texts_are_stored_redacted(form, backend_server, proxy, write_config, admin_client):
    """FailedNodes reasons and a 200 reply's Error are a backend's own text and can echo what
    the Pod holds: redacted in the decisions, the findings and the stored reply, as the error
    text of a non-200 reply is; the scheduler gets them as the backend wrote them."""
    from extproxy.models import Call
    from extproxy.recorder import decompress

    filter_reply = {"NodeNames": ["node-01", "node-05"], "FailedNodes": {k: SECRET_REASONS[k] for k in ("node-02", "node-03")},
                    "FailedAndUnresolvableNodes": {"node-04": SECRET_REASONS["node-04"]}, "Error": ""}
    bind_reply = {"Error": "binding refused: connect postgresql://app:hunter2-error@db/x failed"}
    backend = backend_server({"filter": reply(200, filter_reply), "bind": reply(200, bind_reply)})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    prefix = "/extender/gpu" if form == "per-backend" else "/extender"
    bind = json.dumps({"PodName": "web", "PodNamespace": "ml", "PodUID": "u-1", "Node": "node-01"}).encode()

    answered = post(server, prefix + "/filter", fixture_bytes(FILTER_NAMES))
    assert post(server, prefix + "/bind", bind).status_code == 200
    server.flush()

    assert answered.status_code == 200 and "hunter2-reason" in answered.text and "hunter2-bearer-reason" in answered.text
    listing = admin_client.get(server.url + "/api/calls/?verb=filter").json()["results"]
    assert len(listing) == 1
    call = admin_client.get(server.url + f"/api/calls/{listing[0]['id']}/").json()
    reasons = {d["node"]: d["reason"] for d in call["decisions"] if d["result"] != "passed"}
    assert set(reasons) == {"node-02", "node-03", "node-04"}
    assert reasons["node-03"] == "Insufficient nvidia.com/gpu"  # nothing secret: as written
    assert "hunter2" not in json.dumps(reasons) and REDACTED in reasons["node-02"] and REDACTED in reasons["node-04"]
    stored = admin_client.get(server.url + f"/api/calls/{listing[0]['id']}/response")
    assert b"hunter2" not in stored.content and b"Insufficient nvidia.com/gpu" in stored.content
    assert stored.headers["X-Extproxy-Exact"] == "false" and "node-02" in stored.headers["X-Extproxy-Marks"]

    bound = Call.objects.get(verb="bind")
    assert bound.outcome == "error" and "binding refused" in bound.error and "hunter2" not in bound.error
    assert any(f["kind"] == "error-under-200" for f in bound.findings)
    assert "hunter2" not in json.dumps(bound.findings)
    stored = admin_client.get(server.url + f"/api/calls/{bound.pk}/response")
    assert b"binding refused" in stored.content and b"hunter2" not in stored.content
    children = [child for call_row in Call.objects.all() for child in call_row.backend_calls.all()]
    assert len(children) == (2 if form == "combined" else 0)
    for child in children:  # the combined form's parts: the same texts
        stored_parts = decompress(bytes(child.decisions_blob)) + decompress(bytes(child.response_body))
        assert b"hunter2" not in stored_parts and (b"Insufficient nvidia" in stored_parts) is (child.verb == "filter")
        assert "hunter2" not in child.error + json.dumps(child.findings)


@pytest.mark.parametrize(
    "patterns, raw, expected",
    [
        (RULES.name_patterns, b'{"metadata":{"annotations":{"X-DB-PASSWORD":"x"}}}', True),  # capitals, default names
        (RULES.name_patterns, b'{"metadata":{"annotations":{"Api_Key":"x"}}}', True),
        (RULES.name_patterns, b'{"metadata":{"name":"node-1","labels":{"zone":"a"}}}', False),
        (("ticket\\d+",), b'{"metadata":{"labels":{"TICKET42":"x"}}}', True),  # an escape: searched case-insensitively
        (("ticket\\d+",), b'{"metadata":{"labels":{"TICKETS":"x"}}}', False),
        (("Vault",), b'{"metadata":{"labels":{"vault":"x"}}}', True),  # a capital in the pattern
    ],
)
def test_the_byte_test_finds_names_in_any_case(patterns, raw, expected):
    from extproxy.redaction import needs_redaction

    assert needs_redaction(raw, RedactionConfig(name_patterns=patterns, drop_annotations=())) is expected


@pytest.mark.parametrize(
    "text",
    ['{"name": "DB_PASSWORD", "value": "hunter2"}', "'token': 'hunter2'", "password=hunter2", "Bearer hunter2hunter2",
     "postgres://app:hunter2@db/x", "TOKEN:hunter2"],
)
def test_free_text_is_redacted_whichever_of_the_checks_lets_it_through(text):
    assert "hunter2" not in redact_text(text, RULES)


RAW_POD = (b'{"Pod":{"metadata":{"name":"w\xffb","annotations":{"vault.example.com/token":"s.hunter2-a",'
           b'"kubectl.kubernetes.io/last-applied-configuration":"{\\"env\\":\\"hunter2-l\\"}"}},'
           b'"spec":{"containers":[{"env":[{"value":"hunter2-value-first","name":"HOST"},{"name":"API_TOKEN","value":"hunter2-j"}],'
           b'"args":["--token","hunter2-next","--db-password=hunter2-eq","--epochs=40"]}]}},"NodeNames":["n1"]}')


def test_bytes_that_are_not_json_are_redacted_by_pattern():
    kept, marks = redact_raw(RAW_POD, RULES)
    assert marks == [RAW_MARK_TEXT] and b"hunter2" not in kept
    assert b'"name":"w\xffb"' in kept and b'"--epochs=40"' in kept and b'"name":"HOST"' in kept  # the rest as it came
    assert kept.count(REDACTED.encode()) == 6


def test_bytes_with_nothing_secret_are_kept_as_they_are():
    plain = b'<html>502 Bad Gateway \xff</html>'
    assert redact_raw(plain, RULES) == (plain, [])
    env = b'{"Pod":{"spec":{"containers":[{"env":[{"name":"HOST","value":"db"}]}]}},"x":\xff}'
    assert redact_raw(env, RedactionConfig(env_values=False)) == (env, [])  # a value kept unless envValues
    assert redact_raw(env, RULES)[0].count(REDACTED.encode()) == 1


def test_bytes_that_are_not_json_are_redacted_by_pattern_only_up_to_a_bound(monkeypatch):
    from extproxy.redaction import raw

    monkeypatch.setattr(raw, "RAW_REDACT_MAX", 100)
    long_secret = RAW_POD + b" " * 200
    kept, marks = redact_raw(long_secret, RULES)
    assert len(marks) == 2 and "only the first 100 of its" in marks[1]
    assert b"hunter2" not in kept and kept.startswith(b'{"Pod":{"metadata":{"name":"w\xffb"') and len(kept) < 120
    plain = b"<html>" + b"x" * 300 + b"</html>"  # nothing secret: kept whole, however long
    assert redact_raw(plain, RULES) == (plain, [])
    # A credential across the cut is still recognised (redacted past it, then cut).
    across = b"\xff" + b"x" * 88 + b" Bearer abcdefghij0123 " + b"y" * 300
    kept, marks = redact_raw(across, RULES)
    assert kept == b"\xff" + b"x" * 88 + b" Bearer [re" and len(marks) == 2


FREE_TEXTS = [
    "backend said: --db-password=hunter2 rejected", 'env {"name":"PLAIN","value":"hunter2"}',
    "Authorization: Bearer abcdefghij0123", "Token 0123456789abcdef", "Basic dXNlcjpwYXNzd29yZA==",
    "connect postgresql://app:hunter2@db:5432/x failed", "'api_key': 'hunter2'", "SESSION-ID: hunter2",
    "node(s) didn't match Pod's node affinity/selector", "Insufficient nvidia.com/gpu (want 2, have 1)",
    "2 node(s) had untolerated taint {dedicated: infra}", "",
]


@pytest.mark.parametrize("text", FREE_TEXTS)
@pytest.mark.parametrize("written", ["plain", "json", "json-escaped"])
def test_the_text_byte_test_passes_over_only_what_redaction_leaves_alone(text, written):
    """`text_needs_redaction` lets the recorder skip five expressions per reason: it must never
    say no where redact_text would change a string, however the string is written."""
    from extproxy.redaction import text_needs_redaction

    raw = {"plain": text.encode(), "json": json.dumps({"n1": text}).encode(),
           "json-escaped": ('{"n1":"' + "".join(f"\\u{ord(c):04x}" for c in text) + '"}').encode()}[written]
    decoded = json.loads(raw) if written != "plain" else {"n1": raw.decode()}
    changes = any(redact_text(value, RULES) != value for value in decoded.values())
    if changes:
        assert text_needs_redaction(raw, RULES)
    if written == "plain" and text in FREE_TEXTS[-4:]:  # ordinary reasons: no expression is run
        assert not changes and not text_needs_redaction(raw, RULES)


@pytest.mark.parametrize("spelling", ["once", "twice"])
def test_a_replys_texts_are_redacted_in_every_stored_form(spelling, db):
    """A reply whose FailedNodes is given twice (Go reads the last) cannot be spliced exactly:
    the older canonical form redacts the same texts."""
    from extproxy.recording import compact_body
    from extproxy.recording.blobs import NodeDeduper

    failed = json.dumps({"n2": "DB_PASSWORD=hunter2-x", "n3": "Insufficient cpu"})
    body = ('{"NodeNames":["n1"],' + ('"failedNodes":{"n9":"token=hunter2-first"},' if spelling == "twice" else "")
            + f'"FailedNodes":{failed},"Error":"","FailedAndUnresolvableNodes":{{"n4":"Bearer hunter2-bearer"}}}}').encode()

    stored = compact_body(body, RULES, NodeDeduper(RULES))
    restored = restore(zlib.compress(stored), lambda shas: {})

    assert b"hunter2" not in restored.body and not restored.exact
    kept = json.loads(restored.body)
    assert kept["FailedNodes"] == {"n2": "DB_PASSWORD=[redacted]", "n3": "Insufficient cpu"}
    assert kept["FailedAndUnresolvableNodes"] == {"n4": "Bearer [redacted]"}
    if spelling == "once":  # spliced: what changed is named
        assert {"FailedNodes.n2 redacted", "FailedAndUnresolvableNodes.n4 redacted"} <= set(restored.marks)
    else:
        assert "failedNodes" not in kept


def test_stored_reasons_are_redacted_and_bounded_and_otherwise_the_same_list():
    from extproxy.recording.rows import MAX_REASON_TEXT, stored_decisions
    from extproxy.semantics import Decision, Result

    plain = [Decision("n1", "gpu", Result.FAILED, "Insufficient cpu"), Decision("n2", "gpu", Result.PASSED)]
    assert stored_decisions(plain, RULES) is plain

    long_reason = "x" * (MAX_REASON_TEXT + 10)
    secret = [Decision("n1", "gpu", Result.FAILED, "token=hunter2 " + long_reason),
              Decision("n2", "gpu", Result.FAILED, "Insufficient cpu"),
              Decision("n3", "gpu", Result.UNRESOLVABLE, long_reason)]
    kept = stored_decisions(secret, RULES)
    assert [d.reason for d in kept] == [("token=[redacted] " + long_reason)[:MAX_REASON_TEXT], "Insufficient cpu",
                                        long_reason[:MAX_REASON_TEXT]]
    assert [d.node for d in kept] == ["n1", "n2", "n3"] and kept[1] is secret[1]
    only_long = [Decision("n1", "gpu", Result.FAILED, long_reason)]
    assert [d.reason for d in stored_decisions(only_long, RULES)] == [long_reason[:MAX_REASON_TEXT]]


def test_a_replys_free_text_is_redacted_only_up_to_a_bound():
    """A backend can fill its reply with reasons that look secret; the patterns cost ~0.3 s a
    MiB, so one body's free text is redacted up to FREE_TEXT_REDACT_MAX characters and the rest
    is cut off, saying how much."""
    from extproxy.redaction import redact_free_text

    reasons = {f"n{i}": f"token=hunter2-{i} " + "x" * 100 for i in range(10)}  # 116 characters each
    kept = redact_free_text(reasons, RULES, budget=350)

    assert list(kept) == list(reasons)
    assert all("hunter2" not in text for text in kept.values())
    assert kept["n0"] == "token=[redacted] " + "x" * 100 and kept["n2"] == "token=[redacted] " + "x" * 100
    assert kept["n3"] == "to [114 more characters not kept: too long to redact]"  # 2 characters of the budget left
    assert kept["n4"] == kept["n9"] == "[116 more characters not kept: too long to redact]"
    assert redact_free_text("password=hunter2", RULES) == "password=[redacted]" and redact_free_text(5, RULES) == 5
    # A credential across the cut is still recognised (redacted past it, then cut).
    assert redact_free_text("Bearer abcdefghij0123", RULES, budget=11) == "Bearer [red [10 more characters not kept: too long to redact]"


def test_stored_reasons_are_cut_shorter_when_a_call_has_many_long_ones(monkeypatch):
    from extproxy.recording import rows
    from extproxy.semantics import Decision, Result

    monkeypatch.setattr(rows, "REASONS_REDACT_MAX", 40_000)
    many = [Decision(f"n{i}", "gpu", Result.FAILED, f"node n{i}: secret=hunter2 " + "y" * 5000) for i in range(100)]
    kept = rows.stored_decisions(many, RULES)

    assert all(len(d.reason) == rows.MIN_REASON_TEXT and "hunter2" not in d.reason for d in kept)
    few = rows.stored_decisions(many[:5], RULES)
    assert all(len(d.reason) == rows.MAX_REASON_TEXT and d.reason.startswith(f"node {d.node}: secret=[redacted]") for d in few)
