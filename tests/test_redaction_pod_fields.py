"""Redaction of the Pod fields beyond env and args that hold secrets just as often: probes' and
lifecycle hooks' commands and HTTP headers, flexVolume options, and a secret flag's value inside
one shell string. In a unit table, and end to end (a real proxy and backend; what is stored)."""
from __future__ import annotations

import copy
import json

import pytest

from extproxy.config import RedactionConfig
from extproxy.redaction import REDACTED, redact_object, redact_text
from tests.conftest import fixture_bytes, pass_all
from tests.test_per_backend import FILTER_NAMES, config_for, only_call, post

RULES = RedactionConfig()
SECRET = "hunter2SECRETVALUE"


def with_secrets(pod: dict) -> dict:
    """The Pod with a secret in each of the places the audit found kept as it came."""
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    main = spec["containers"][0]
    main["livenessProbe"] = {"httpGet": {"path": "/healthz", "port": 8080, "httpHeaders": [
        {"name": "Authorization", "value": f"Bearer {SECRET}"}, {"name": "X-Trace", "value": "keep-me"}]}}
    main["startupProbe"] = {"httpGet": {"path": "/", "port": 8080, "httpHeaders": [
        {"name": "X-Forward", "value": f"Token {SECRET}"}]}}
    main["readinessProbe"] = {"exec": {"command": ["sh", "-c", f"PGPASSWORD={SECRET} psql -c 'select 1'"]}}
    main["lifecycle"] = {"postStart": {"exec": {"command": ["mysql", "--password", SECRET]}},
                         "preStop": {"httpGet": {"path": "/quit", "port": 80, "httpHeaders": [
                             {"name": "Cookie", "value": f"sid={SECRET}"}]}}}
    main["args"] = ["sh", "-c", f"mysqld --password {SECRET} --port 3306"]
    spec["initContainers"] = [{"name": "init", "image": "busybox", "lifecycle": {
        "postStart": {"exec": {"command": ["sh", "-c", f"login --password={SECRET}"]}}}}]
    spec["ephemeralContainers"] = [{"name": "debug", "image": "busybox", "livenessProbe": {
        "exec": {"command": ["check", "--api-key", SECRET]}}}]
    spec["volumes"] = (spec.get("volumes") or []) + [
        {"name": "flex", "flexVolume": {"driver": "example.com/cifs", "options": {"password": SECRET, "share": "data"}}}]
    return pod


def test_every_probe_hook_and_volume_option_is_redacted():
    pod = json.loads(fixture_bytes(FILTER_NAMES))["Pod"]
    redacted = redact_object(with_secrets(pod), RULES)

    assert SECRET not in json.dumps(redacted)
    main = redacted["spec"]["containers"][0]
    assert main["livenessProbe"]["httpGet"]["httpHeaders"] == [
        {"name": "Authorization", "value": REDACTED}, {"name": "X-Trace", "value": "keep-me"}]
    assert main["lifecycle"]["postStart"]["exec"]["command"] == ["mysql", "--password", REDACTED]
    assert main["args"] == ["sh", "-c", f"mysqld --password {REDACTED} --port 3306"]
    assert redacted["spec"]["volumes"][-1]["flexVolume"]["options"] == {"password": REDACTED, "share": "data"}
    # what is not secret is kept, and redacting again changes nothing (`manage.py redact`)
    assert main["readinessProbe"]["exec"]["command"][2] == f"PGPASSWORD={REDACTED} psql -c 'select 1'"
    assert redact_object(copy.deepcopy(redacted), RULES) == redacted


@pytest.mark.parametrize("text, expected", [
    ("mysqld --password hunter2 --port 3306", f"mysqld --password {REDACTED} --port 3306"),
    ("run --token 'hunter 2' now", f"run --token {REDACTED} now"),
    ("run --password --verbose", "run --password --verbose"),  # a flag, not a value
    ("serve --listen 8080", "serve --listen 8080"),
])
def test_a_secret_flags_value_inside_one_string_is_redacted(text, expected):
    assert redact_text(text, RULES) == expected
    assert redact_text(expected, RULES) == expected


def test_a_pod_with_secrets_in_probes_and_hooks_is_stored_redacted(backend_server, proxy, write_config, admin_client):
    from extproxy.models import Call
    from extproxy.recorder import decompress

    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    request = json.loads(fixture_bytes(FILTER_NAMES))
    request["Pod"] = with_secrets(request["Pod"])

    assert post(server, "/extender/gpu/filter", json.dumps(request).encode()).status_code == 200
    only_call(admin_client, server)

    stored = decompress(bytes(Call.objects.get().request_body))
    assert SECRET.encode() not in stored
    assert b"keep-me" in stored
    assert SECRET.encode() in backend.received[0][1]  # the backend itself got the pod as it was
