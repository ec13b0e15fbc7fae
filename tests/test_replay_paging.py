"""The dashboard's run page pages through a run's calls: "N of M" and an offset pager."""
from __future__ import annotations

import re

import pytest

from extproxy.models import ReplayItem, ReplayRun
from extproxy.replay.paging import index_kinds
from tests.test_replay_pages import logged_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_run_page_pages_through_450_calls():
    run = ReplayRun.objects.create(selector={"filters": {}}, target={"kind": "configured"}, status="done",
                                   total=450, done=450, changed=150, counts={"passed->failed": 150})
    ReplayItem.objects.bulk_create([
        ReplayItem(run=run, changed=i % 3 == 0, kinds=["passed->failed"] if i % 3 == 0 else [], error=f"e{i}")
        for i in range(450)
    ])
    index_kinds(ReplayItem.objects.filter(run=run))  # as the runner enters them with each item
    pages = logged_in("developer")

    def rows(query: str) -> tuple[list[str], str]:
        page = pages.get(f"/replays/{run.pk}/{query}").content.decode()
        return re.findall(r'class="error">(e\d+)<', page), page

    first, page = rows("")
    assert len(first) == 200 and first[0] == "e0" and "1–200 of 450" in page and "?offset=200" in page
    last, page = rows("?offset=400")
    assert last == [f"e{i}" for i in range(400, 450)] and "401–450 of 450" in page
    assert "?offset=200" in page and "next</a>" not in page
    changed, page = rows("?kind=passed-%3Efailed&offset=100")
    assert changed == [f"e{i}" for i in range(300, 450, 3)] and "101–150 of 150" in page
    assert "kind=passed-%3Efailed&amp;offset=0" in page
    for bad in ("-1", "x", "²", str(2**63)):
        response = pages.get(f"/replays/{run.pk}/?offset={bad}")
        assert response.status_code == 400 and b"offset" in response.content, bad


def test_the_progress_poll_reads_the_run_and_none_of_its_calls():
    """The run page polls its progress every second while the run goes on; the poll shows the
    run's row only. It counted and read (and decompressed the diffs of) 200 of the run's calls
    each time: with 5,000 calls about 45 ms a poll against 13 ms now (measured once on a loaded
    two-core machine, SQLite and PostgreSQL alike; not asserted here, the queries are)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    run = ReplayRun.objects.create(selector={"filters": {}}, target={"kind": "configured"}, status="running",
                                   total=900, done=300, changed=100, counts={"passed->failed": 100})
    ReplayItem.objects.bulk_create([
        ReplayItem(run=run, changed=i % 3 == 0, kinds=["passed->failed"] if i % 3 == 0 else [], error=f"e{i}")
        for i in range(300)
    ])
    index_kinds(ReplayItem.objects.filter(run=run))  # as the runner enters them with each item
    pages = logged_in("developer")
    poll = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "progress"}

    with CaptureQueriesContext(connection) as queries:
        response = pages.get(f"/replays/{run.pk}/", **poll)
    page = response.content.decode()
    assert response.status_code == 200 and 'class="run-done">300</span>/900' in page and "passed-&gt;failed" in page
    assert "HX-Refresh" not in response and 'hx-trigger="every 1s"' in page
    assert not [q["sql"] for q in queries.captured_queries if "replayitem" in q["sql"].lower()]
    assert "e0" not in page  # the calls are the page's, not the poll's

    ReplayRun.objects.filter(pk=run.pk).update(status="done", done=900)
    finished = pages.get(f"/replays/{run.pk}/", **poll)
    assert finished["HX-Refresh"] == "true" and 'class="run-status">done<' in finished.content.decode()
    assert 'class="error">e0<' in pages.get(f"/replays/{run.pk}/").content.decode()  # the whole page still lists them


def test_the_api_pages_through_a_runs_calls_with_their_count_and_the_next_offset():
    """A script paged until a page came back short, with no count and no next offset; and a
    negative offset was read as 0 where any other bad offset is a 400."""
    from django.contrib.auth.models import Group, User
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    run = ReplayRun.objects.create(selector={"filters": {}}, target={"kind": "configured"}, status="done",
                                   total=450, done=450, changed=150, counts={"passed->failed": 150})
    ReplayItem.objects.bulk_create([
        ReplayItem(run=run, changed=i % 3 == 0, kinds=["passed->failed"] if i % 3 == 0 else [], error=f"e{i}")
        for i in range(450)
    ])
    index_kinds(ReplayItem.objects.filter(run=run))  # as the runner enters them with each item
    user = User.objects.create_user("dev", password="pw")
    user.groups.add(Group.objects.get(name="developer"))
    api = APIClient(HTTP_AUTHORIZATION="Token " + Token.objects.create(user=user).key)

    seen, offset = [], 0
    while offset is not None:
        page = api.get(f"/api/replays/{run.pk}/?offset={offset}").json()
        assert page["items_total"] == 450
        seen += [item["error"] for item in page["items"]]
        offset = page["items_next"]
    assert seen == [f"e{i}" for i in range(450)]
    changed = api.get(f"/api/replays/{run.pk}/?changed=1&offset=100").json()
    assert (changed["items_total"], changed["items_next"], len(changed["items"])) == (150, None, 50)
    response = api.get(f"/api/replays/{run.pk}/?offset=-1")
    assert response.status_code == 400 and "offset" in response.json(), response.content


def test_a_kind_page_reads_the_diffs_of_the_calls_it_shows_only():
    """Paging by kind read every changed call of the run whole, its compressed diff included, to
    find the ones of that kind (a 12,000-call run: about 50 MB read for one page). It reads the
    kinds now, then the page's calls."""
    import zlib

    from django.db import connection

    diff = zlib.compress(b'{"kinds": {}, "nodes": []}')
    run = ReplayRun.objects.create(selector={"filters": {}}, target={"kind": "configured"}, status="done",
                                   total=600, done=600, changed=600, counts={"passed->failed": 60, "score": 540})
    ReplayItem.objects.bulk_create([
        ReplayItem(run=run, changed=True, kinds=["passed->failed"] if i % 10 == 0 else ["score"], error=f"e{i}",
                   diff_blob=diff)
        for i in range(600)
    ])
    index_kinds(ReplayItem.objects.filter(run=run))  # as the runner enters them with each item
    statements: list[tuple[str, tuple]] = []

    def watched(execute, sql, params, many, context):
        statements.append((sql, tuple(params or ())))
        return execute(sql, params, many, context)

    pages = logged_in("developer")
    with connection.execute_wrapper(watched):
        page = pages.get(f"/replays/{run.pk}/?kind=passed-%3Efailed&offset=20").content.decode()
    assert re.findall(r'class="error">(e\d+)<', page) == [f"e{i}" for i in range(200, 600, 10)]
    assert "21–60 of 60" in page
    shown = set(ReplayItem.objects.filter(run=run, error__in=[f"e{i}" for i in range(200, 600, 10)])
                .values_list("id", flat=True))
    with_diffs = [(sql, params) for sql, params in statements if "diff_blob" in sql]
    assert len(with_diffs) == 1, with_diffs
    assert shown <= set(with_diffs[0][1]) and len(with_diffs[0][1]) <= len(shown) + 1, with_diffs  # those 40, by id
