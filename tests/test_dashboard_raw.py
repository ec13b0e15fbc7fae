"""Raw records (COMMON shape: a call that could not be decoded: outcome error, empty pod fields,
no decisions, an `undecodable-request` or `undecodable-reply` finding, bodies as received) on
every page and in both feeds: shown for what they are, never a 500."""
from __future__ import annotations

import zlib
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.test_dashboard_pages import viewer

pytestmark = pytest.mark.django_db(transaction=True)


def raw_call(kind: str, body: bytes, pod: tuple[str, str, str] = ("", "", ""), verb: str = "filter"):
    from extproxy.models import Call

    now = timezone.now()
    return Call.objects.create(
        verb=verb, backend="gpu", started_at=now - timedelta(seconds=1), finished_at=now, outcome="error",
        http_status=200, error=f"{kind}: unexpected end of JSON input", pod_namespace=pod[0], pod_name=pod[1],
        pod_uid=pod[2], attempt="", findings=[{"kind": kind, "detail": "unexpected end of JSON input"}],
        request_body=zlib.compress(b"R" + body), response_body=zlib.compress(b"R" + body), decisions_blob=b"")


def test_it_shows_undecodable_calls_on_every_page():
    raw_call("undecodable-request", b'{"Pod": {"metadata": {"name": "tru')
    raw_call("undecodable-reply", b"<html>502 Bad Gateway</html>", pod=("ml-team", "web-1", "uid-web-1"))
    client = viewer()

    for path in ("/", "/?view=calls", "/backends/", "/pending/", "/pods/ml-team/web-1/", "/feed/summary/"):
        assert client.get(path).status_code == 200, path
    calls = client.get("/feed/calls/").json()["results"]
    assert sorted(c["findings"][0]["kind"] for c in calls) == ["undecodable-reply", "undecodable-request"]
    attempts = client.get("/feed/attempts/").json()["results"]
    assert len(attempts) == 2 and {a["pod"]["name"] for a in attempts} == {"", "web-1"}
    told = next(a for a in attempts if a["pod"]["name"] == "web-1")
    assert told["steps"][0]["outcome"] == "error" and "unexpected end of JSON input" in told["steps"][0]["error"]
    backends = client.get("/backends/").content.decode()
    assert "undecodable-request" in backends and "undecodable-reply" in backends
    story = client.get("/pods/ml-team/web-1/").context["story"]
    assert story.state == "pending" and "unexpected end of JSON input" in story.sentence  # a non-ignorable filter error
