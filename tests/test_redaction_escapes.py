"""A backend may write what it repeats with JSON's `\\uXXXX` escapes, plain letters included
(`\\u0068unter2secret`): the recorder sees through them, for a value removed from the request
(its echo, in a reply's Error, reasons and own fields, a JSON fragment a reason quotes, a text
reply) and for a name that says a secret follows (`"pass\\u0077ord": "x"`, in bytes that are not
JSON and in a reason's text); and a value written with a URL's %XX escapes. Through the
recorder's rows, and once through the running proxy."""
from __future__ import annotations

import json

import pytest

from extproxy.redaction import REDACTED
from tests.conftest import reply
from tests.test_redaction_echoes import RULES, Recorded, filter_reply, pod_request, record, trace

SECRET = "hunter2secret"


def escape(text: str, which=lambda i, ch: True, upper: bool = False) -> str:
    """`text` with the characters `which` picks written as \\uXXXX (a surrogate pair past U+FFFF)."""
    out = []
    for i, ch in enumerate(text):
        if not which(i, ch):
            out.append(ch)
            continue
        units = ch.encode("utf-16-be")
        for k in range(0, len(units), 2):
            code = f"{int.from_bytes(units[k:k + 2], 'big'):04x}"
            out.append("\\u" + (code.upper() if upper else code))
    return "".join(out)


WRITTEN = {
    "first-letter": escape(SECRET, lambda i, ch: i == 0),
    "every-letter": escape(SECRET),
    "upper-hex": escape(SECRET, upper=True),
    "mixed": escape(SECRET, lambda i, ch: ch in "tn", upper=True),
}


def with_written(answer: bytes, written: str) -> bytes:
    """A reply holding SECRET, as a backend wrote it: `written` in place of each SECRET."""
    return answer.replace(SECRET.encode(), written.encode())


def stored_texts(rec: Recorded) -> str:
    return rec.everything() + "\n".join(json.dumps(rec.body(row.response_body).body.decode())
                                        for row in [rec.call, *rec.children])


def assert_not_kept(rec: Recorded, written: str) -> None:
    texts = stored_texts(rec)
    assert SECRET not in texts and written not in texts and written.replace("\\", "\\\\") not in texts


@pytest.mark.parametrize("form", sorted(WRITTEN))
@pytest.mark.parametrize("mode", ["names", "full"])
def test_a_reason_and_the_error_written_with_escapes_are_stored_without_it(mode, form):
    request = pod_request(mode, env={"DB_PASSWORD": SECRET})
    reasons = with_written(filter_reply(request, {"node-02": f"env map[DB:{SECRET}]"}), WRITTEN[form])
    error = with_written(filter_reply(request, {}, error=f"no: {SECRET}"), WRITTEN[form])  # the scheduler's error
    assert SECRET.encode() not in reasons + error
    failed, erred = record(trace(request, reasons), trace(request, error))

    assert failed.reasons()["node-02"] == f"env map[DB:{REDACTED}]"
    assert erred.call.error == f"no: {REDACTED}"
    assert_not_kept(failed, WRITTEN[form])
    assert_not_kept(erred, WRITTEN[form])


@pytest.mark.parametrize("form", sorted(WRITTEN))
def test_a_json_fragment_a_reason_quotes_with_escapes_is_stored_without_it(form):
    """The reason, decoded, holds `\\u0068...`; the reply's bytes hold it escaped once more."""
    request = pod_request(env={"DB_PASSWORD": SECRET})
    reason = 'backend said {"db": {"pw": "' + WRITTEN[form] + '"}}'
    response = filter_reply(request, {"node-01": reason}, Debug={"last": reason})
    [rec] = record(trace(request, response))

    assert rec.reasons() == {"node-01": 'backend said {"db": {"pw": "' + REDACTED + '"}}'}
    assert json.loads(rec.body(rec.call.response_body).body)["Debug"] == {"last": rec.reasons()["node-01"]}
    assert_not_kept(rec, WRITTEN[form])


def test_a_character_past_u_ffff_written_as_a_surrogate_pair_is_seen_through():
    secret = "hunter2\U0001F510secret"
    request = pod_request(env={"DB_PASSWORD": secret})
    written = escape(secret, lambda i, ch: ord(ch) > 0xFFFF, upper=True)  # \uD83D\uDD10, not as Python writes it
    response = filter_reply(request, {"node-01": "with " + "@@"}).replace(b"@@", written.encode())
    [rec] = record(trace(request, response))

    assert rec.reasons() == {"node-01": f"with {REDACTED}"}
    assert secret not in stored_texts(rec) and written not in stored_texts(rec)


def test_a_text_reply_with_escapes_is_stored_without_it():
    request = pod_request(env={"DB_PASSWORD": SECRET})
    body = f"upstream: password for db is {WRITTEN['every-letter']} (refused)".encode()
    [rec] = record(trace(request, body, status=500))

    assert REDACTED in rec.call.error
    assert rec.body(rec.call.response_body).body == f"upstream: password for db is {REDACTED} (refused)".encode()
    assert_not_kept(rec, WRITTEN["every-letter"])


def test_escapes_of_other_text_change_nothing():
    """Escapes that write no removed value are kept as written (and a reason without any stays)."""
    request = pod_request(env={"DB_PASSWORD": SECRET})
    reasons = {"node-01": "pool \\u0068unter2 full", "node-02": "no \\u003cgpu\\u003e free", "node-03": "no room"}
    [rec] = record(trace(request, filter_reply(request, reasons)))

    assert rec.reasons() == reasons


# --- names that say a secret follows, written with escapes ---------------------------------------
KEY = "pass\\u0077ord"  # password
VALUE = "val-s3cr3t-99"
POD_HEAD = '{"Pod": {"metadata": {"name": "p", "annotations": {"a": "b"}}, "spec": {"containers": [{'
UNREADABLE_PODS = {  # each cut short: read by pattern
    "annotation": '{"Pod": {"metadata": {"name": "p", "annotations": {"db-' + KEY + '": "' + VALUE + '"}}, "spec": {',
    "env-value": POD_HEAD + '"env": [{"name": "MODE", "v\\u0061lue": "' + VALUE + '"}',
    "flag": POD_HEAD + '"args": ["--db-' + KEY + '", "' + VALUE + '", "--epochs=4"',
    "listed-annotation": ('{"Pod": {"metadata": {"annotations": {"kubectl.kubernetes.io\\/last-applied-configuration": "'
                          + VALUE + '"'),
}


@pytest.mark.parametrize("where", sorted(UNREADABLE_PODS))
def test_a_request_read_by_pattern_with_an_escaped_secret_name_is_stored_without_its_value(where):
    [rec] = record(trace(UNREADABLE_PODS[where].encode(), b"", status=500))

    assert VALUE not in rec.body(rec.call.request_body).body.decode()
    assert REDACTED in rec.body(rec.call.request_body).body.decode()


def test_a_text_reply_with_an_escaped_secret_name_is_stored_without_its_value():
    request = pod_request(env={"MODE": "fast"})
    body = ('{"error": "bad config", "' + KEY + '": "' + VALUE + '", "trace": ').encode()  # not JSON: cut short
    [rec] = record(trace(request, body, status=500))

    assert VALUE not in rec.call.error
    assert VALUE not in stored_texts(rec)


def test_a_replys_own_field_under_an_escaped_secret_name_is_stored_without_its_value():
    """Read as JSON, the name is `password`: the key rule already sees it (kept as a proof)."""
    request = pod_request(env={"MODE": "fast"})
    response = filter_reply(request, {}, Debug={"@@": VALUE}).replace(b"@@", KEY.encode())
    [rec] = record(trace(request, response))

    assert json.loads(rec.body(rec.call.response_body).body)["Debug"] == {"password": REDACTED}
    assert VALUE not in stored_texts(rec)


def test_a_reason_quoting_json_with_an_escaped_secret_name_is_stored_without_its_value():
    request = pod_request(env={"MODE": "fast"})
    reason = 'rejected {"user": "bob", "' + KEY + '": "' + VALUE + '"}'
    failed, erred = record(trace(request, filter_reply(request, {"node-01": reason})),
                           trace(request, filter_reply(request, {}, error=reason)))

    assert VALUE not in failed.reasons()["node-01"] and REDACTED in failed.reasons()["node-01"]
    assert VALUE not in erred.call.error and REDACTED in erred.call.error
    assert VALUE not in stored_texts(failed) + stored_texts(erred)


# --- a URL's %XX ---------------------------------------------------------------------------------
# Go's HTTP client quotes the URL in every error (`Get "http://...": dial tcp ...`): a backend that
# puts a value in a query or a form body writes its reserved characters as %XX.
URL_SECRET = "p@ss/w0rd+Ké"
URL_WRITTEN = {
    "reserved-characters": "p%40ss%2Fw0rd%2BK%C3%A9",  # as url.QueryEscape writes it
    "every-character": "".join(f"%{b:02x}" for b in URL_SECRET.encode()),  # lower-case hex, letters too
}


@pytest.mark.parametrize("form", sorted(URL_WRITTEN))
def test_a_value_written_with_url_escapes_is_stored_without_it(form):
    request = pod_request(env={"VAULT_LOGIN": URL_SECRET})
    reason = f'Get "http://vault:8200/v1/login?u=bob&p={URL_WRITTEN[form]}": dial tcp: connection refused'
    failed, erred = record(trace(request, filter_reply(request, {"node-01": reason})),
                           trace(request, f"upstream said {URL_WRITTEN[form]}!".encode(), status=502))

    assert failed.reasons() == {"node-01": f'Get "http://vault:8200/v1/login?u=bob&p={REDACTED}": dial tcp: connection refused'}
    assert erred.call.error.endswith(f"upstream said {REDACTED}!")
    for rec in (failed, erred):
        assert URL_WRITTEN[form] not in stored_texts(rec) and URL_SECRET not in stored_texts(rec)


def test_a_fully_url_escaped_value_of_plain_letters_is_stored_without_it():
    request = pod_request(env={"DB_PASSWORD": SECRET})
    written = "%68unter2secret"
    [rec] = record(trace(request, filter_reply(request, {"node-01": f"GET /check?k={written} 403"})))

    assert rec.reasons() == {"node-01": f"GET /check?k={REDACTED} 403"}


def test_percent_signs_and_other_url_escapes_change_nothing():
    request = pod_request(env={"DB_PASSWORD": SECRET})
    reasons = {"node-01": "CPU at 100% for 5m", "node-02": "GET /a%20b?x=%68unter2 404", "node-03": "bad %zz"}
    [rec] = record(trace(request, filter_reply(request, reasons)))

    assert rec.reasons() == reasons


def test_it_works_end_to_end_through_the_proxy(backend_server, proxy, write_config, admin_client):
    from extproxy.models import Call
    from extproxy.recording.blobs import decompress, restore
    from tests.test_per_backend import config_for, only_call, post

    request = pod_request(env={"DB_PASSWORD": SECRET})
    written = WRITTEN["mixed"]
    answer = with_written(filter_reply(request, {"node-02": f"values: map[DB:{SECRET}]"}, Note=f"echo {SECRET}"), written)
    backend = backend_server({"filter": reply(200, answer)})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))

    answered = post(server, "/extender/gpu/filter", json.dumps(request).encode())
    call = only_call(admin_client, server)

    assert written.encode() in answered.content  # the scheduler gets the reply as written
    shown = json.dumps(call)
    assert SECRET not in shown and written not in shown and written.replace("\\", "\\\\") not in shown
    row = Call.objects.get()
    reasons = {d["node"]: d["reason"] for d in call["decisions"] if d["reason"]}
    assert reasons == {"node-02": f"values: map[DB:{REDACTED}]"}
    stored = restore(bytes(row.response_body), lambda shas: {}).body + decompress(bytes(row.decisions_blob))
    assert SECRET.encode() not in stored and written.encode() not in stored

