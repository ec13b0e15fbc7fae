"""A backend can echo a secret of the request in a form no pattern knows (Go's `%v` of a map, YAML
in a longer message, a JSON fragment, the bare value): the values redaction removed from a call's
request are removed from that call's stored texts too (its error, findings, reasons, the reply's
free-text fields; the combined form's parts; raw records). Short values are left alone, and so are
names the record shows anyway; a call whose request had nothing redacted pays nothing."""
from __future__ import annotations

import json
import time
import zlib

import msgspec
import pytest

from extproxy.config import RedactionConfig
from extproxy.recording.attempts import AttemptTracker
from extproxy.recording.blobs import NodeDeduper, decompress, restore
from extproxy.recording.rows import build_or_raw
from extproxy.recording.trace import Trace
from extproxy.redaction import ECHO_MARK, ECHO_MIN_CHARS, REDACTED, collecting, echoes, redact_object
from tests.conftest import fixture_bytes, reply

RULES = RedactionConfig()
SECRET = "hunter2"  # seven characters: a short password is still looked for
# Each in a form no text pattern recognises (no secret-like name before the value).
ECHOES = {
    "go-map": f"config map[DB_PW:{SECRET} USER:bob] refused",
    "yaml": f"bad values:\n  user: bob\n  pw: {SECRET}\n  port: 5432",
    "json": f'backend said {{"db": {{"pw": "{SECRET}"}}}}',
    "bare": SECRET,
}


def pod_request(mode: str = "names", env: dict[str, str] | None = None, args: list[str] | None = None,
                headers: list[dict[str, str]] | None = None) -> dict:
    name = "filter-request.nodecache-true.json" if mode == "names" else "filter-request.nodecache-false.json"
    request = json.loads(fixture_bytes(name))
    container = request["Pod"]["spec"]["containers"][0]
    container["env"] = [{"name": key, "value": value} for key, value in (env or {"DB_PASSWORD": SECRET}).items()]
    if args is not None:
        container["args"] = args
    if headers is not None:
        container["livenessProbe"] = {"httpGet": {"path": "/healthz", "port": 8080, "httpHeaders": headers}}
    return request


def names_of(request: dict) -> list[str]:
    return request["NodeNames"] or [n["metadata"]["name"] for n in request["Nodes"]["items"]]


def filter_reply(request: dict, reasons: dict[str, str], error: str = "", **extra) -> bytes:
    names = names_of(request)
    passed = [n for n in names if n not in reasons]
    answer: dict = {"FailedNodes": reasons, "Error": error, **extra}
    if request["NodeNames"]:
        answer["NodeNames"] = passed
    else:
        answer["Nodes"] = {"metadata": {}, "items": [n for n in request["Nodes"]["items"] if n["metadata"]["name"] in passed]}
    return json.dumps(answer).encode()


def trace(request: dict | bytes, response: bytes, status: int = 200, **fields) -> Trace:
    now = time.time()
    body = request if isinstance(request, bytes) else json.dumps(request).encode()
    defaults = dict(verb="filter", backend="gpu", url="http://gpu/scheduler", started_at=now, finished_at=now + 0.002,
                    request_body=body, status=status, response_body=response, answered_status=status,
                    node_cache_capable=not isinstance(request, dict) or bool(request.get("NodeNames")), weight=1)
    defaults.update(fields)
    return Trace(**defaults)


class Recorded:
    """One call's rows as the recorder builds them, with its bodies and reasons read back."""

    def __init__(self, built, nodes: NodeDeduper) -> None:
        (self.call, self.children), self.raw = built
        self.batch = nodes.take_batch()[0]

    def body(self, blob: bytes):
        return restore(bytes(blob), lambda shas: {s: self.batch[s][1] for s in shas if s in self.batch})

    def reasons(self, row=None) -> dict[str, str]:
        row = row or self.call
        return {d["node"]: d["reason"] for d in msgspec.json.decode(decompress(bytes(row.decisions_blob))) if d["reason"]}

    def everything(self) -> str:
        """Every text stored for the call, each body as restored."""
        rows = [self.call, *self.children]
        texts = []
        for row in rows:
            texts += [row.error, json.dumps(row.findings), json.dumps(self.reasons(row))]
            texts += [self.body(row.request_body).body.decode(), self.body(row.response_body).body.decode()]
        return "\n".join(texts)


def record(*traces: Trace, nodes: NodeDeduper | None = None) -> list[Recorded]:
    nodes = nodes or NodeDeduper(RULES)
    attempts = AttemptTracker()
    return [Recorded(build_or_raw(t, RULES, attempts, nodes), nodes) for t in traces]


@pytest.mark.parametrize("form", sorted(ECHOES))
@pytest.mark.parametrize("mode", ["names", "full"])
def test_a_reason_that_repeats_a_redacted_value_is_stored_without_it(mode, form):
    request = pod_request(mode)
    [rec] = record(trace(request, filter_reply(request, {"node-02": ECHOES[form]})))

    reason = rec.reasons()["node-02"]
    assert SECRET not in reason and REDACTED in reason
    assert SECRET not in rec.everything()
    kept = rec.body(rec.call.response_body)
    assert json.loads(kept.body)["FailedNodes"]["node-02"] == reason
    assert f"FailedNodes['node-02']{ECHO_MARK}" in kept.marks


def test_the_error_the_findings_and_a_replys_own_fields_are_stored_without_it():
    request = pod_request()
    response = filter_reply(request, {}, error=f"cannot use map[DB_PASSWORD:{SECRET}]",
                            Debug={"seen": [f"env {SECRET}", "ok"], "count": 2})
    [rec] = record(trace(request, response))

    assert rec.call.error == f"cannot use map[DB_PASSWORD:{REDACTED}]"
    assert any(f["kind"] == "error-under-200" for f in rec.call.findings)  # it quotes the Error
    assert SECRET not in json.dumps(rec.call.findings)
    stored = json.loads(rec.body(rec.call.response_body).body)
    assert stored["Debug"] == {"seen": [f"env {REDACTED}", "ok"], "count": 2}
    assert SECRET not in rec.everything()


def test_a_non_200_text_reply_that_repeats_it_is_stored_without_it():
    request = pod_request()
    [rec] = record(trace(request, f"upstream: password {SECRET} refused".encode(), status=500))

    assert SECRET not in rec.call.error and "upstream: password" in rec.call.error
    kept = rec.body(rec.call.response_body)
    assert kept.body == f"upstream: password {REDACTED} refused".encode()
    assert f"the body{ECHO_MARK}" in kept.marks


def test_values_of_arguments_headers_and_annotations_are_looked_for_too():
    token, key, note = "ghp_0123456789abcdef", "AKIAEXAMPLEKEY", "s3cr3t-annotation"
    request = pod_request(args=["--api-key", key, "--epochs=40"],
                          headers=[{"name": "Authorization", "value": f"Bearer {token}"}])
    request["Pod"]["metadata"]["annotations"]["example.com/db-secret"] = note
    reasons = {"node-01": f"token {token} expired", "node-02": f"key={key}!", "node-03": f"[{note}]"}
    [rec] = record(trace(request, filter_reply(request, reasons)))

    assert rec.reasons() == {"node-01": f"token {REDACTED} expired", "node-02": f"key={REDACTED}!",
                             "node-03": f"[{REDACTED}]"}


def test_a_value_written_with_json_escapes_is_found_as_go_writes_it():
    secret = 'p<w>&"d-123'
    request = pod_request(env={"DB_PASSWORD": secret})
    # Go's encoder writes <, > and & as \u003c, \u003e, \u0026
    response = filter_reply(request, {"node-01": f"with {secret}"}).replace(b"<", b"\\u003c").replace(
        b">", b"\\u003e").replace(b"&", b"\\u0026")
    assert secret.encode() not in response
    [rec] = record(trace(request, response))

    assert rec.reasons() == {"node-01": f"with {REDACTED}"}


def test_a_pod_seen_again_from_the_recorders_memory_is_still_looked_for():
    """The recorder remembers a redacted Pod and a stored request by their bytes: what they
    removed is remembered with them."""
    request = pod_request()
    nodes = NodeDeduper(RULES)
    clean = trace(request, filter_reply(request, {"node-01": "no room"}))
    echoed = trace(request, filter_reply(request, {"node-01": f"no room for {SECRET}"}))
    first, second = record(clean, echoed, nodes=nodes)

    assert nodes.redact_field.hits or nodes.stored  # the second request came from memory
    assert first.reasons() == {"node-01": "no room"}
    assert second.reasons() == {"node-01": f"no room for {REDACTED}"}


def test_a_nodes_redacted_annotation_is_looked_for_in_a_full_object_call():
    request = pod_request("full", env={"MODE": "fast"})
    request["Nodes"]["items"][0]["metadata"].setdefault("annotations", {})["example.com/api-token"] = "node-tok-9876"
    nodes = NodeDeduper(RULES)
    reasons = {"node-02": "peer node-tok-9876 refused"}
    first, again = record(trace(request, filter_reply(request, reasons)), trace(request, filter_reply(request, reasons)),
                          nodes=nodes)

    assert first.reasons() == again.reasons() == {"node-02": f"peer {REDACTED} refused"}


def combined(request: dict, parts: list[tuple[str, bytes, str]], answer: bytes) -> Trace:
    kids = [trace(request, body, backend=name, transport_error=error, status=None if error else 200)
            for name, body, error in parts]
    return trace(request, answer, backend="combined", form="combined", backend_calls=kids)


def test_the_combined_forms_parts_are_stored_without_it():
    request = pod_request()
    echoed = filter_reply(request, {"node-03": f"map[DB_PASSWORD:{SECRET}]"})
    parts = [("gpu", echoed, ""), ("slow", b"", f"Post \"http://slow/filter\": {SECRET} timeout")]
    answer = filter_reply(request, {"node-03": f"map[DB_PASSWORD:{SECRET}]"}, error=f"backend slow: {SECRET}")
    [rec] = record(combined(request, parts, answer))

    gpu, slow = rec.children
    assert rec.reasons(gpu) == {"node-03": f"map[DB_PASSWORD:{REDACTED}]"}
    assert slow.error == f"Post \"http://slow/filter\": {REDACTED} timeout"
    assert rec.reasons()["node-03"] == f"map[DB_PASSWORD:{REDACTED}]"
    assert SECRET not in rec.everything()


UNREADABLE = b'{"Pod": {"spec": {"containers": [{"env": [{"name": "DB_PASSWORD", "value": "' + SECRET.encode() + b'"}]'


def test_a_request_that_cannot_be_read_is_redacted_by_pattern_and_that_is_looked_for_too():
    [rec] = record(trace(UNREADABLE, f"refused: {SECRET}".encode(), status=500))

    assert SECRET not in rec.everything()
    assert rec.body(rec.call.response_body).body == f"refused: {REDACTED}".encode()


def test_a_raw_record_is_stored_without_it():
    from extproxy.recording.rows import raw_call

    kid = trace(UNREADABLE, f"refused: {SECRET}".encode(), status=500, backend="gpu")
    call, [child] = raw_call(trace(UNREADABLE, b"", status=None, transport_error=f"gave up on {SECRET}",
                                   backend_calls=[kid]), "undecodable-request", "test", RULES)
    rec = Recorded(((call, [child]), True), NodeDeduper(RULES))

    assert call.error == f"gave up on {REDACTED}"
    assert SECRET not in rec.everything()
    assert rec.body(child.response_body).body == f"refused: {REDACTED}".encode()


@pytest.mark.parametrize("value", ["WARN", "debug", "12345"])
def test_a_value_shorter_than_the_minimum_is_left_in_the_texts(value):
    assert len(value) < ECHO_MIN_CHARS
    request = pod_request(env={"LOG_LEVEL": value})
    reason = f"node has {value} set"
    [rec] = record(trace(request, filter_reply(request, {"node-01": reason})))

    assert rec.reasons() == {"node-01": reason}


def test_a_value_that_is_part_of_a_name_the_record_shows_is_left_in_the_texts():
    """Names are shown anyway (node and pod names are never redacted), and a reason that names
    a node must stay readable."""
    request = pod_request(env={"UPSTREAM": "node-03", "SELF": "trainer-7d9c5b6f8", "DB_PASSWORD": SECRET})
    reasons = {"node-03": "node-03 has no room for trainer-7d9c5b6f8-b4x2s", "node-04": f"pw {SECRET}"}
    [rec] = record(trace(request, filter_reply(request, reasons)))

    assert rec.reasons() == {"node-03": reasons["node-03"], "node-04": f"pw {REDACTED}"}


def test_a_call_whose_request_had_nothing_redacted_costs_a_list_test():
    """The common case: nothing removed, no expression built or run over the call's texts."""
    request = json.loads(fixture_bytes("filter-request.nodecache-true.json"))
    request["Pod"]["spec"]["containers"][0]["env"] = []
    pod = json.dumps(request["Pod"]).encode()
    with collecting() as removed:
        redact_object(json.loads(pod), RULES)
    assert removed == [] and echoes(removed) is None
    [rec] = record(trace(request, filter_reply(request, {"node-01": "hunter22 is a node label"})))
    assert rec.reasons() == {"node-01": "hunter22 is a node label"}


def test_the_values_looked_for_are_bounded():
    from extproxy.redaction import ECHO_MAX_CHARS, ECHO_MAX_VALUES

    many = [f"value-{i:05d}" for i in range(ECHO_MAX_VALUES + 50)]
    long_one = "k" * (ECHO_MAX_CHARS * 3)
    found = echoes(many + [long_one, "-----BEGIN KEY-----\nline-one-of-key\nline-two-of-key\n-----END KEY-----"])
    assert len(found.values) == ECHO_MAX_VALUES
    assert max(map(len, found.values)) == ECHO_MAX_CHARS  # a long value's head
    assert "line-one-of-key" in found.values  # a value of several lines is looked for line by line


def test_it_works_end_to_end_on_the_api_and_in_the_stored_reply(backend_server, proxy, write_config, admin_client):
    from extproxy.models import Call
    from tests.test_per_backend import config_for, only_call, post

    request = pod_request()
    echoed = filter_reply(request, {"node-02": f"values: map[DB_PASSWORD:{SECRET}]"}, error="")
    backend = backend_server({"filter": reply(200, json.loads(echoed))})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))

    answered = post(server, "/extender/gpu/filter", json.dumps(request).encode())
    call = only_call(admin_client, server)

    assert SECRET in answered.text  # the scheduler gets the reply as written
    assert SECRET not in json.dumps(call)
    stored = restore(bytes(Call.objects.get().response_body), lambda shas: {})
    assert SECRET.encode() not in stored.body
    assert SECRET.encode() not in zlib.decompress(bytes(Call.objects.get().decisions_blob))


def test_a_long_value_across_the_cut_of_a_reason_is_not_kept_in_part():
    """A reason is redacted over twice its kept length, then cut: a long value that starts
    inside the kept part and ends past that window is still found whole."""
    from extproxy.recording.rows import MAX_REASON_TEXT

    long_value = "k3y" + "A" * 2997
    request = pod_request(env={"TLS_KEY": long_value})
    reason = "x" * (MAX_REASON_TEXT - 500) + long_value
    [rec] = record(trace(request, filter_reply(request, {"node-01": reason})))

    assert rec.reasons()["node-01"] == ("x" * (MAX_REASON_TEXT - 500) + REDACTED)


def test_a_value_past_ascii_is_found_as_pythons_encoder_escapes_it_and_bytes_that_are_not_utf8_do_not_fail():
    secret = "pässwörd-42"
    request = pod_request(env={"DB_PASSWORD": secret})
    response = json.dumps({"NodeNames": ["node-02"], "FailedNodes": {"node-01": f"with {secret}"}, "Error": ""}).encode()
    assert secret.encode() not in response  # \u00e4 as Python's json writes it
    [rec] = record(trace(request, response))
    assert rec.reasons() == {"node-01": f"with {REDACTED}"}

    assert echoes(["abc\udc80defgh"]).text("x abc\udc80defgh y") == f"x {REDACTED} y"
