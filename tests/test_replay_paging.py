"""The dashboard's run page pages through a run's calls: "N of M" and an offset pager."""
from __future__ import annotations

import re

import pytest

from extproxy.models import ReplayItem, ReplayRun
from tests.test_replay_pages import logged_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_run_page_pages_through_450_calls():
    run = ReplayRun.objects.create(selector={"filters": {}}, target={"kind": "configured"}, status="done",
                                   total=450, done=450, changed=150, counts={"passed->failed": 150})
    ReplayItem.objects.bulk_create([
        ReplayItem(run=run, changed=i % 3 == 0, kinds=["passed->failed"] if i % 3 == 0 else [], error=f"e{i}")
        for i in range(450)
    ])
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
