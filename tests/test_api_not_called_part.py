"""A combined call's part that extproxy did not make (registered with names, a full-object
backend whose Node objects it does not have) has no request and no reply. Its bodies through the
API say so, as the call page does, instead of answering empty bytes marked exact ("as
received"). Real backends on loopback, the real proxy and recorder, the API."""
from __future__ import annotations

from tests.conftest import fixture_bytes, pass_all

NAMES = "captured-kube-scheduler-1.24/filter-request.nodecache-true.json"


def test_the_bodies_of_a_part_never_sent_are_a_404_that_says_why(backend_server, proxy, write_config, admin_client):
    full = backend_server({"filter": pass_all})
    names = backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [
        {"name": "names", "urlPrefix": names.url, "filterVerb": "filter", "nodeCacheCapable": True, "ignorable": True},
        {"name": "full", "urlPrefix": full.url, "filterVerb": "filter", "ignorable": True},
    ]}))
    answered = admin_client.post(server.url + "/extender/filter", data=fixture_bytes(NAMES), timeout=30)
    assert answered.status_code == 200 and full.received == [] and len(names.received) == 1
    server.flush()

    call = admin_client.get(server.url + "/api/calls/?backend=combined", timeout=30).json()["results"][0]
    parts = {p["backend"]: p for p in admin_client.get(server.url + f"/api/calls/{call['id']}/", timeout=30).json()["backend_calls"]}
    base = server.url + f"/api/calls/{call['id']}/backend-calls"
    for which in ("request", "response"):
        got = admin_client.get(f"{base}/{parts['full']['id']}/{which}", timeout=30)
        assert got.status_code == 404, (which, got.status_code, got.headers, got.content[:200])
        assert "X-Extproxy-Exact" not in got.headers
        detail = got.json()["detail"]
        assert detail.startswith(f"extproxy did not call backend full, so there is no {which}: no Node object"), detail
        assert detail.count("did not call") == 1, detail  # said once, then why
        # the part that was made still gives its bytes
        made = admin_client.get(f"{base}/{parts['names']['id']}/{which}", timeout=30)
        assert made.status_code == 200 and made.headers["X-Extproxy-Exact"] == "true" and made.content


def test_a_not_called_finding_without_its_detail_still_reads_as_not_called():
    """"" means "called" to every caller (the call page, the API, the pod story): a finding
    stored without its detail must not turn a part that was never sent into one that was."""
    from extproxy.bodies import not_called_reason
    from extproxy.models import BackendCall

    assert not_called_reason(BackendCall(findings=[{"kind": "not-called"}])) == "no reason was recorded"
    assert not_called_reason(BackendCall(findings=[{"kind": "not-called", "detail": None}])) == "no reason was recorded"
    assert not_called_reason(BackendCall(findings=[{"kind": "score-out-of-range"}])) == ""
