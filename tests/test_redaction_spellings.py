"""A Pod's secrets are redacted in every spelling Go's decoder binds to their fields: encoding/json
matches a key to a struct field by exact name, else case-insensitively (and with the runes
U+017F and U+212A folded to s and K), so `Env`, `ENV` and `env` are one field of a Container.
kube-scheduler sends its own spelling, but a backend's reply (victim Pods) and a replayed or
hand-written request need not. End to end: a real proxy and backend, what is stored."""
from __future__ import annotations

import json

import pytest

from extproxy.config import RedactionConfig
from extproxy.redaction import REDACTED, needs_redaction, redact_object
from tests.conftest import fixture_bytes, pass_all
from tests.test_per_backend import FILTER_NAMES, config_for, only_call, post

RULES = RedactionConfig()


def spelled(pod: dict, spellings: dict[str, str]) -> dict:
    """`pod` with each key in `spellings` renamed wherever it occurs (its value kept)."""
    if isinstance(pod, list):
        return [spelled(item, spellings) for item in pod]  # type: ignore[return-value]
    if not isinstance(pod, dict):
        return pod
    return {spellings.get(key, key): spelled(value, spellings) for key, value in pod.items()}


def secret_pod() -> dict:
    pod = json.loads(fixture_bytes(FILTER_NAMES))["Pod"]
    container = pod["spec"]["containers"][0]
    container["env"] = [{"name": "DB_HOST", "value": "hunter2-env"}]
    container["args"] = ["--token", "hunter2-arg"]
    container["livenessProbe"] = {"httpGet": {"path": "/healthz", "port": 80, "httpHeaders": [
        {"name": "Authorization", "value": "Bearer hunter2-header"}]}}
    pod["metadata"].setdefault("annotations", {})["vault.example.com/token"] = "hunter2-annotation"
    return pod


SPELLINGS = [
    {"env": "Env"},
    {"env": "ENV", "args": "ARGS"},
    {"containers": "Containers", "spec": "Spec", "metadata": "Metadata"},
    {"httpHeaders": "HTTPHeaders", "livenessProbe": "LivenessProbe", "value": "Value", "name": "Name"},
    {"args": "arg\u017f"},  # Go folds U+017F to s: "argſ" is the args field
    {"annotations": "ANNOTATIONS"},
]


@pytest.mark.parametrize("spellings", SPELLINGS, ids=lambda s: ",".join(s.values()))
def test_every_spelling_go_reads_as_the_field_is_redacted(spellings):
    pod = spelled(secret_pod(), spellings)
    raw = json.dumps(pod).encode()
    assert needs_redaction(raw, RULES)  # the byte test must not let it pass undecoded
    stored = json.dumps(redact_object(json.loads(raw), RULES))
    assert "hunter2" not in stored, stored
    assert REDACTED in stored


def test_a_key_written_with_escapes_is_not_passed_over_by_the_byte_test():
    raw = json.dumps({"spec": {"containers": [{"name": "a", "\u0065nv": [{"name": "X", "value": "s"}]}]}},
                     ensure_ascii=False).encode().replace(b'"env"', b'"\\u0065nv"')
    assert b'"env"' not in raw.lower()
    assert needs_redaction(raw, RULES)


def test_a_map_key_is_data_and_not_folded():
    """Labels are a map: `App` and `app` are two labels, neither a field: both kept as they are."""
    pod = {"metadata": {"labels": {"App": "web", "app": "db"}}}
    assert redact_object(pod, RULES) == {"metadata": {"labels": {"App": "web", "app": "db"}}}


def test_a_pod_spelled_otherwise_is_stored_redacted(backend_server, proxy, write_config, admin_client):
    from extproxy.models import Call
    from extproxy.recorder import decompress

    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    request = json.loads(fixture_bytes(FILTER_NAMES))
    request["Pod"] = spelled(secret_pod(), {"env": "Env", "args": "Args", "httpHeaders": "HttpHeaders"})

    assert post(server, "/extender/gpu/filter", json.dumps(request).encode()).status_code == 200
    only_call(admin_client, server)

    stored = decompress(bytes(Call.objects.get().request_body))
    assert b"hunter2" not in stored, stored[:2000]
    assert b"hunter2-env" in backend.received[0][1]  # the backend got the pod as it was


@pytest.mark.parametrize("pods_key", ["Pods", "pods", "PODS"])
def test_a_victims_pods_are_redacted_whichever_spelling_holds_them(pods_key):
    """Victims.Pods as Go binds it: every key that folds to Pods (a backend's preempt reply may
    spell it its own way; the scheduler reads it all the same)."""
    from extproxy import bodyformat
    from extproxy.redaction import redact_free_text, text_needs_redaction

    redact = bodyformat.redactor(lambda pod: redact_object(pod, RULES), lambda raw: needs_redaction(raw, RULES),
                                 lambda value, keyed: redact_free_text(value, RULES, keyed),
                                 lambda raw: text_needs_redaction(raw, RULES))
    victims = {"node-1": {pods_key: [secret_pod()], "NumPDBViolations": 0}}
    done = redact("NodeNameToVictims", json.dumps(victims).encode())
    assert done is not None and b"hunter2" not in done[0]
