"""`manage.py redact`: a rule added after a secret reached the record redacts what is already kept.

Calls are recorded through a real proxy and backend under the default rules, which do not know
the secret's name (`flavour`); then the configuration gains the name and the command runs. Every
place the record keeps a Pod's, a Node's, a backend's or the scheduler's words is looked at
through the API and the pages, and in the tables; marks say what changed; a second run changes
nothing."""
from __future__ import annotations

import json
import zlib
from io import StringIO

import msgspec
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from extproxy.config import RedactionConfig
from extproxy.config.types import SECRET_NAME_PATTERNS
from extproxy.recording import redact_stored
from extproxy.recording.blobs import compress, decompress
from extproxy.recording.redact_stored import RedactionRun, record_tables
from extproxy.redaction import REDACTED
from extproxy.replay import diff as diffs
from tests.conftest import fixture_bytes, reply
from tests.test_bodies import CAPTURED
from tests.test_dashboard_pages import viewer
from tests.test_per_backend import config_for, post

pytestmark = pytest.mark.django_db(transaction=True)

NEW_RULES = RedactionConfig(name_patterns=SECRET_NAME_PATTERNS + ("flavou?r",))
SECRET = b"s3kr1t"  # in every secret below, and nowhere else


def full_object_request() -> tuple[bytes, dict]:
    """A captured full-object filter request with a secret in the Pod's annotations and args
    and in one Node's annotations (the default rules redact none of them)."""
    request = json.loads(fixture_bytes(CAPTURED + "filter-request.nodecache-false.json"))
    request["Pod"]["metadata"]["annotations"] = {"acme.io/flavour": "s3kr1t-pod-annotation", "team": "ml"}
    request["Pod"]["spec"]["containers"][0]["args"] = ["--flavour=s3kr1t-pod-arg", "--epochs=40"]
    request["Pod"]["spec"]["containers"][0]["env"] = [{"name": "HOST", "value": "db-host-1"}]  # redacted when stored
    for node in (1, 3):
        request["Nodes"]["items"][node]["metadata"]["annotations"]["acme.io/flavour"] = f"s3kr1t-node-annotation-{node}"
    return json.dumps(request).encode(), request


def redacted_as_the_new_rules_would(request: dict) -> dict:
    expected = json.loads(json.dumps(request))
    expected["Pod"]["metadata"]["annotations"]["acme.io/flavour"] = REDACTED
    expected["Pod"]["spec"]["containers"][0]["args"][0] = f"--flavour={REDACTED}"
    expected["Pod"]["spec"]["containers"][0]["env"][0]["value"] = REDACTED
    for node in (1, 3):
        expected["Nodes"]["items"][node]["metadata"]["annotations"]["acme.io/flavour"] = REDACTED
    return expected


def filter_with_a_secret_reason(handler, body: bytes) -> None:
    """A full-object reply: the Nodes sent, but cpu-node-1 failed with a reason that quotes a secret."""
    nodes = msgspec.json.decode(body)["Nodes"]
    failed = {"cpu-node-1": "flavour=s3kr1t-reason is not allowed here"}
    nodes["items"] = [n for n in nodes["items"] if n["metadata"]["name"] not in failed]
    handler.answer(200, json.dumps({"Nodes": nodes, "NodeNames": None, "FailedNodes": failed, "Error": ""}).encode())


def record_a_secret_everywhere(backend_server, proxy, write_config) -> tuple[object, dict]:
    """Calls and rows of every kind that keep text, recorded under the default rules."""
    from dashboard.models import SchedulerEvent
    from extproxy.models import Call, ReplayItem, ReplayRun

    backend = backend_server({
        "filter": filter_with_a_secret_reason,
        "prioritize": reply(500, "flavour=s3kr1t-raw-body", "text/plain"),
        "bind": reply(200, {"Error": "binding refused: flavour=s3kr1t-bind-error"}),
    })
    server = proxy(write_config(config_for(backend.url)))
    body, request = full_object_request()
    names = json.dumps({"Pod": request["Pod"], "NodeNames": ["gpu-node-1"], "Nodes": None}).encode()
    bind = json.dumps({"PodName": "web-nc-false", "PodNamespace": "default", "PodUID": "u-1", "Node": "gpu-node-1"}).encode()
    for prefix in ("/extender/gpu", "/extender"):  # per backend, and the combined form (each backend's part)
        assert post(server, prefix + "/filter", body).status_code == 200
        post(server, prefix + "/prioritize", names)
        assert post(server, prefix + "/bind", bind).status_code == 200
    # Two Pods: Go reads the last, and the body is kept in the older canonical form (only that one).
    post(server, "/extender/gpu/prioritize", b'{"Pod":{"metadata":{"name":"first"}},' + names[1:])
    server.flush()
    forms = {decompress(bytes(getattr(c, side)))[:1] for c in Call.objects.all() for side in ("request_body", "response_body")}
    assert forms == {b"S", b"C", b"R"}  # spliced, canonical, as received (the 500's text)

    SchedulerEvent.objects.create(key="e-1", kind="FailedScheduling", pod_namespace="default", pod_name="web-nc-false",
                                  message="0/4 nodes are available: flavour=s3kr1t-event", at=timezone.now())
    before = diffs.Side("gpu", "filter", "ok", "", [{"node": "cpu-node-1", "backend": "gpu", "result": "passed"}])
    after = diffs.Side("gpu", "filter", "ok", "", [{"node": "cpu-node-1", "backend": "gpu", "result": "failed",
                                                   "reason": "flavour=s3kr1t-diff"}])
    diff_json = diffs.diff(before, after).to_json()
    assert b"s3kr1t-diff" in msgspec.json.encode(diff_json)
    run = ReplayRun.objects.create(selector={"pod": "default/web-nc-false"}, status="done",
                                   error="target said flavour=s3kr1t-replay-run")
    ReplayItem.objects.create(run=run, original=Call.objects.filter(verb="filter").first(), changed=True,
                              diff_blob=compress(msgspec.json.encode(diff_json)), error="flavour=s3kr1t-replay-item")
    return server, request


def everything_stored(admin_client, server) -> bytes:
    """Every stored text and body, as the API gives it and as the tables hold it, in one string
    (in key order: PostgreSQL gives an updated row back in another place)."""
    from dashboard.models import SchedulerEvent
    from extproxy.models import BackendCall, Call, NodeObject, ReplayItem, ReplayRun

    def get(path: str) -> bytes:
        response = admin_client.get(server.url + path)
        assert response.status_code == 200, (path, response.status_code, response.text[:200])
        return response.content

    seen = []
    for call in Call.objects.order_by("pk"):
        base = f"/api/calls/{call.pk}/"
        seen.append(get(base))
        for side in ("request", "response"):
            seen.append(get(base + side))
        for part in call.backend_calls.order_by("pk"):
            if any(f.get("kind") == "not-called" for f in part.findings):
                # Never sent: the API has no bodies for it (a 404 saying why); its rows are read below.
                for side in ("request", "response"):
                    assert admin_client.get(server.url + base + f"backend-calls/{part.pk}/{side}").status_code == 404
                continue
            for side in ("request", "response"):
                seen.append(get(base + f"backend-calls/{part.pk}/{side}"))
    for row in list(Call.objects.order_by("pk")) + list(BackendCall.objects.order_by("pk")):
        seen += [row.error.encode(), json.dumps(row.findings).encode(), decompress(bytes(row.decisions_blob))]
        seen += [decompress(bytes(row.request_body)), decompress(bytes(row.response_body))]
    seen += [zlib.decompress(bytes(node.data)) for node in NodeObject.objects.order_by("pk")]
    seen += [event.message.encode() for event in SchedulerEvent.objects.order_by("pk")]
    seen += [zlib.decompress(bytes(item.diff_blob)) + item.error.encode() for item in ReplayItem.objects.order_by("pk")]
    seen += [run.error.encode() for run in ReplayRun.objects.order_by("pk")]
    return b"\n".join(seen)


def test_a_rule_added_later_redacts_every_record_already_kept(backend_server, proxy, write_config, admin_client,
                                                              settings):
    from extproxy.models import AuditEvent, Call

    server, request = record_a_secret_everywhere(backend_server, proxy, write_config)
    stored = everything_stored(admin_client, server)
    for secret in (b"pod-annotation", b"pod-arg", b"node-annotation", b"reason", b"bind-error", b"raw-body",
                   b"event", b"diff", b"replay-run", b"replay-item"):
        assert SECRET + b"-" + secret in stored  # the default rules kept each one
    settings.EXTPROXY_CONFIG = write_config({**config_for("http://127.0.0.1:9"),
                                             "redaction": {"namePatterns": list(NEW_RULES.name_patterns)}},
                                            name="new-rules.yaml")

    dry = StringIO()
    call_command("redact", "--dry-run", stdout=dry)
    assert "extproxy.Call: 7 read, would change:" in dry.getvalue() and "request_body 5" in dry.getvalue()
    assert everything_stored(admin_client, server) == stored  # a dry run writes nothing

    out = StringIO()
    call_command("redact", stdout=out)

    after = everything_stored(admin_client, server)
    assert SECRET not in after, after[max(0, after.find(SECRET) - 300):after.find(SECRET) + 100]
    assert b"flavour=" + REDACTED.encode() in after and b"--epochs=40" in after and b"0/4 nodes are available" in after
    # The full-object request: what was received but for the three redactions, and marks that say so.
    full = Call.objects.filter(verb="filter").order_by("pk").first()
    restored = admin_client.get(server.url + f"/api/calls/{full.pk}/request")
    assert json.loads(restored.content) == redacted_as_the_new_rules_would(request)
    assert restored.headers["X-Extproxy-Exact"] == "false"
    marks = restored.headers["X-Extproxy-Marks"]
    for mark in ("Pod.spec.containers[0].env[0].value redacted",  # when it was stored: kept
                 "Pod.metadata.annotations['acme.io/flavour'] redacted", "Pod.spec.containers[0].args[0] redacted",
                 "Nodes.items[1].metadata.annotations['acme.io/flavour'] redacted",
                 "Nodes.items[3].metadata.annotations['acme.io/flavour'] redacted"):
        assert mark in marks
    reasons = {d["node"]: d["reason"] for d in admin_client.get(server.url + f"/api/calls/{full.pk}/").json()["decisions"]
               if d["result"] != "passed"}
    assert reasons == {"cpu-node-1": f"flavour={REDACTED} is not allowed here"}
    # The pages show the redacted record.
    client = viewer()
    for page in (f"/calls/{full.pk}/", "/pods/default/web-nc-false/", "/pending/", "/replays/"):
        response = client.get(page)
        assert response.status_code == 200 and SECRET not in response.content, page
    event = AuditEvent.objects.get(action="records-redacted")
    assert event.detail["changed"]["extproxy.NodeObject.data"] == 2 and event.detail["failed"] == {}

    again = StringIO()
    call_command("redact", stdout=again)
    assert "changed: nothing" in again.getvalue() and "changed: request" not in again.getvalue()
    assert everything_stored(admin_client, server) == after  # nothing changes the second time, no mark twice
    assert AuditEvent.objects.filter(action="records-redacted").count() == 2


def test_every_row_is_read_once_whatever_the_batches(backend_server, proxy, write_config, admin_client, monkeypatch):
    """Batches of 2 rows, 1 byte (each row alone, being larger), 3 keys a page and one changed Node
    object held at a time (so the bodies are read again to mark the second): each row is read and
    redacted once, as one run in large batches does. A call recorded meanwhile is not read."""
    from extproxy.models import BackendCall, Call

    server, request = record_a_secret_everywhere(backend_server, proxy, write_config)
    monkeypatch.setattr(redact_stored, "_KEYS_AT_ONCE", 3)
    monkeypatch.setattr(redact_stored, "NODE_MARKS_MAX", 1)
    pages = []

    def progress(tally) -> None:
        if not pages:  # a call recorded after the run began (under the new rules by then)
            Call.objects.create(verb="bind", backend="gpu", started_at=timezone.now(), finished_at=timezone.now(),
                                outcome="ok", error="recorded meanwhile")
        pages.append(1)

    tally = RedactionRun(NEW_RULES, batch_rows=2, batch_bytes=1, progress=progress).run(record_tables())

    assert tally.examined["extproxy.Call"] == 7 and Call.objects.count() == 8
    assert tally.examined["extproxy.BackendCall"] == BackendCall.objects.count() == 3
    assert tally.changed["extproxy.NodeObject.data"] == 2 and tally.passes == 2 and len(pages) >= 9
    full = Call.objects.filter(verb="filter").order_by("pk").first()
    restored = admin_client.get(server.url + f"/api/calls/{full.pk}/request")
    assert json.loads(restored.content) == redacted_as_the_new_rules_would(request)
    assert "Nodes.items[1]" in restored.headers["X-Extproxy-Marks"] and "Nodes.items[3]" in restored.headers["X-Extproxy-Marks"]
    assert SECRET not in everything_stored(admin_client, server).replace(b"s3kr1t-event", b"")
    assert RedactionRun(NEW_RULES).run(record_tables()).changed == {}


def test_a_batch_the_database_refuses_is_tried_again_then_counted(backend_server, proxy, write_config, admin_client,
                                                                 monkeypatch):
    from django.db import OperationalError

    from extproxy.models import Call

    server, _ = record_a_secret_everywhere(backend_server, proxy, write_config)
    monkeypatch.setattr(redact_stored.time, "sleep", lambda seconds: None)
    refusals = {"left": 2}
    update = RedactionRun._update

    def refuse_twice(model, updates):
        if refusals["left"]:
            refusals["left"] -= 1
            raise OperationalError("database is locked")
        update(model, updates)

    monkeypatch.setattr(RedactionRun, "_update", staticmethod(refuse_twice))
    tally = RedactionRun(NEW_RULES).run(record_tables())
    assert refusals["left"] == 0 and tally.failed == {}
    assert SECRET not in everything_stored(admin_client, server).replace(b"s3kr1t-event", b"")

    refusals["left"] = 99  # every attempt: the batch is counted, the run goes on
    Call.objects.filter(verb="bind").update(error="flavour=s3kr1t-again")
    tally = RedactionRun(NEW_RULES).run(record_tables())
    assert tally.failed == {"extproxy.Call": 2} and tally.changed["extproxy.Call.error"] == 2


def test_a_row_that_cannot_be_read_is_counted_and_the_rest_redacted(backend_server, proxy, write_config,
                                                                    admin_client, settings):
    from extproxy.models import Call, NodeObject

    server, _ = record_a_secret_everywhere(backend_server, proxy, write_config)
    broken = Call.objects.filter(verb="bind").order_by("pk").first()
    Call.objects.filter(pk=broken.pk).update(response_body=b"not zlib")
    NodeObject.objects.create(sha256="0" * 64, name="broken", data=b"not zlib either")
    settings.EXTPROXY_CONFIG = write_config({**config_for("http://127.0.0.1:9"),
                                             "redaction": {"namePatterns": list(NEW_RULES.name_patterns)}},
                                            name="new-rules.yaml")

    out = StringIO()
    with pytest.raises(CommandError, match="2 row"):
        call_command("redact", stdout=out)

    assert "extproxy.Call: 7 read" in out.getvalue() and "1 could not be redacted" in out.getvalue()
    assert "extproxy.NodeObject: 5 read, changed: data 2; 1 could not be redacted" in out.getvalue()
    rest = Call.objects.exclude(pk=broken.pk)
    assert all(SECRET not in decompress(bytes(c.request_body)) + decompress(bytes(c.response_body)) for c in rest)
    assert SECRET not in Call.objects.get(pk=broken.pk).error.encode()  # its other fields: redacted all the same


def test_the_shadow_process_redacts_the_examples_it_kept_when_it_starts(tmp_path):
    from extproxy.shadow import Shadower
    from extproxy.shadowstats import ShadowState, ShadowStats, save_state

    stats = ShadowStats("next", "gpu", calls=1, different=1)
    stats.examples.append({"call_id": "c-1", "changes": [{"node": "n1", "before": "ok", "after": "flavour=s3kr1t-x"}]})
    save_state(tmp_path, ShadowState(shadows={"next": stats}))

    shadower = Shadower(tmp_path, {}, redaction=NEW_RULES)

    kept = shadower.state.shadows["next"].examples
    assert list(kept) == [{"call_id": "c-1", "changes": [{"node": "n1", "before": "ok", "after": f"flavour={REDACTED}"}]}]



POD = {"metadata": {"name": "p", "annotations": {"note": "password=a flavour=s3kr1t-annotation"}},
       "spec": {"containers": [{"name": "c", "args": ["--password=abc --flavour=s3kr1t-arg"]}]}}
BODIES = {
    "a request whose fields the old rules redacted in part": {"Pod": POD, "NodeNames": ["n1"], "Nodes": None},
    "a reply whose texts the old rules redacted in part": {
        "NodeNames": [], "FailedNodes": {"n1": "password=x flavour=s3kr1t-reason"}, "Error": "token: abc flavour=s3kr1t-error"},
    "a reply cut at the budget of redaction when stored": {
        "FailedNodes": {"n1": "password=a " + "x" * (1 << 20), "n2": "never redacted"}, "Error": "flavour=s3kr1t-error"},
}


@pytest.mark.parametrize("form", ["spliced", "canonical"])
@pytest.mark.parametrize("name", list(BODIES))
def test_a_stored_body_ends_as_if_recorded_under_the_new_rules(name, form):
    """Whatever the old rules did to a field (a mark of theirs on it, a note of what they cut),
    redacting again gives the body that recording under the new rules gives, and a second time
    changes nothing. The older canonical form: a body that names a field twice (Go reads the last)."""
    from extproxy.recording.blobs import NodeDeduper, restore_body
    from extproxy.recording.redact_again import Bodies

    raw = json.dumps(BODIES[name]).encode()
    if form == "canonical":
        raw = (b'{"Pod":{},' if b'"Pod"' in raw else b'{"Error":"",') + raw[1:]
    stored = NodeDeduper(RedactionConfig()).stored_body(raw)
    assert decompress(stored)[:1] == (b"S" if form == "spliced" else b"C")
    assert SECRET in restore_body(stored, lambda keys: {})

    redacted = Bodies(NEW_RULES, {}).body(stored)

    assert redacted is not None
    as_if_new = NodeDeduper(NEW_RULES).stored_body(raw)
    assert restore_body(redacted, lambda keys: {}) == restore_body(as_if_new, lambda keys: {})
    assert SECRET not in restore_body(redacted, lambda keys: {})
    assert Bodies(NEW_RULES, {}).body(redacted) is None
