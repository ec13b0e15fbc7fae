"""The developer's reads of recorded bodies, copy-outs and replays reach the audit trail: who,
what and from where (issue 12's list). End to end: a real backend, the real proxy, the API."""
from __future__ import annotations

from extproxy.audit import Action
from extproxy.models import AuditEvent
from tests.conftest import fixture_bytes, pass_all
from tests.test_per_backend import config_for, post
from tests.test_replay import FULL, developer, recorded, replay_one  # noqa: F401  (developer: a fixture)


def audited(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def test_it_audits_bodies_copy_out_and_replays_with_who_and_where(backend_server, proxy, write_config, admin_client, developer):  # noqa: F811
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=False)))
    post(server, "/extender/gpu/filter", fixture_bytes(FULL))
    [call] = recorded(server, admin_client)
    assert not audited(Action.BODIES_DOWNLOADED) and not audited(Action.COPY_OUT) and not audited(Action.REPLAY)

    for path in ("request", "response", "curl", "fixture"):
        response = developer.get(f"{server.url}/api/calls/{call['id']}/{path}", timeout=30)
        assert response.status_code == 200, (path, response.text[:200])
    run = replay_one(developer, server, call["id"])

    bodies = audited(Action.BODIES_DOWNLOADED)
    assert [e.target for e in bodies] == [f"call {call['id']} request", f"call {call['id']} response"]
    copies = audited(Action.COPY_OUT)
    assert [e.detail["as"] for e in copies] == ["curl", "fixture"]
    [replay] = audited(Action.REPLAY)
    assert replay.target == f"replay {run['id']}"
    assert replay.detail["selector"] == {"call": call["id"]}
    for event in bodies + copies + [replay]:
        assert event.actor == developer.username
        assert event.source == "127.0.0.1"


def test_it_does_not_audit_a_refused_body_read(backend_server, proxy, write_config, admin_client):
    """A viewer has no view_bodies: the 403 reads nothing, so nothing was downloaded."""
    from tests.test_replay import user_client

    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=False)))
    post(server, "/extender/gpu/filter", fixture_bytes(FULL))
    [call] = recorded(server, admin_client)
    viewer = user_client("viewer")
    assert viewer.get(f"{server.url}/api/calls/{call['id']}/request", timeout=30).status_code == 403
    assert not audited(Action.BODIES_DOWNLOADED)
