"""Every listing's `since` and `until` read as an export's are (extproxy/exporttimes.py): digits
past the microsecond rounded up, and a `+` offset typed into a URL unencoded (it arrives as a
space) read as `+`. /api/calls/, /api/gaps/, the live feed and the audit trail cut nanoseconds
down (a call stored in the microsecond before `since` was listed) and refused the space form
with "Enter a valid date/time", where the export of the same range read both as meant."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.contrib.auth.models import User
from django.test import Client

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 12, 7, 9, 0, 0, 500000, tzinfo=timezone.utc)


def stored(id_: int, at: datetime):
    from extproxy.models import Call

    return Call.objects.create(id=id_, call_id=f"c-{id_}", verb="filter", backend="gpu", started_at=at,
                               finished_at=at + timedelta(milliseconds=3), outcome="ok",
                               request_body=b"", response_body=b"", decisions_blob=b"")


@pytest.fixture
def superuser() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "", "pw"))
    return client


def ids(client: Client, path: str, query: str) -> list[int]:
    """The ids listed, given a raw query string (as a browser's address bar sends it)."""
    response = client.get(f"{path}?{query}")
    assert response.status_code == 200, (query, response.content[:300])
    body = response.json()
    return sorted(c["id"] for c in body.get("results", body.get("calls", [])))


def test_nanoseconds_past_a_stored_microsecond_leave_that_call_out_of_since_and_in_until(superuser):
    for i in range(4):
        stored(i + 1, T0 + timedelta(microseconds=i))
    since = "2026-12-07T09:00:00.500000001Z"  # one nanosecond after call 1
    until = "2026-12-07T09:00:00.500002001Z"  # one nanosecond after call 3
    assert ids(superuser, "/api/calls/", f"since={since}&until={until}") == [2, 3]
    assert ids(superuser, "/feed/calls/", f"since={since}&until={until}") == [2, 3]


def test_a_plus_offset_that_arrived_as_a_space_is_read_as_plus(superuser):
    stored(1, T0)
    stored(2, T0 + timedelta(hours=2))
    # 10:30 at +01:00 is 09:30 UTC: call 1 (09:00) before it, call 2 (11:00) after. The + unencoded.
    assert ids(superuser, "/api/calls/", "since=2026-12-07T10:30:00+01:00") == [2]
    assert superuser.get("/api/gaps/?since=2026-12-07T10:30:00+01:00").status_code == 200
    assert superuser.get("/api/audit/?since=2026-12-07T10:30:00+01:00").status_code == 200
