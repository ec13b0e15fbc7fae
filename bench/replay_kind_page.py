"""What a replay run's page of one kind of change costs with 100,000 items (a benchmark, not a
test): the run page (`/replays/<id>/?kind=`) and the API (`/api/replays/<id>/?kind=`), each
request's server time through Django's test client in this process, p50 and p90 of ROUNDS.

The rows are made directly (bulk inserts, never through the proxy) in a throwaway database: an
SQLite file in a temporary directory, or with REPLAY_BENCH_PG=postgresql://user@host:port/name
that PostgreSQL database (created if missing, its tables flushed first: give one of your own).
The run's items are shaped like a day's replay against a build that changes some decisions:
30 % changed, mostly scores and ranks, 1 in 100 a filter verdict, 1 in 1,000 an outcome; each
changed item with a compressed diff of about 20 node changes.

    .venv/bin/python bench/replay_kind_page.py           # REPLAY_BENCH_ITEMS=100000 ROUNDS=15
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ITEMS = int(os.environ.get("REPLAY_BENCH_ITEMS", "100000"))
ROUNDS = int(os.environ.get("ROUNDS", "15"))


def kinds_of(i: int) -> list[str]:
    if i % 1000 == 7:
        return ["outcome:ok->error"]
    if i % 100 == 3:
        return ["passed->failed"]
    if i % 10 < 3:
        return ["rank", "score", "weighted_score"] + (["winner"] if i % 10 == 0 else [])
    return []


def setup() -> str:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "extproxy.settings")
    os.environ.setdefault("EXTPROXY_SKIP_CONFIG_CHECK", "1")
    scratch = tempfile.mkdtemp(prefix="replay-bench-")
    os.environ["EXTPROXY_DATA_DIR"] = scratch
    if os.environ.get("REPLAY_BENCH_PG"):
        os.environ["DATABASE_URL"] = os.environ["REPLAY_BENCH_PG"]
    else:
        os.environ.pop("DATABASE_URL", None)
        os.environ["EXTPROXY_SQLITE_PATH"] = str(Path(scratch) / "bench.sqlite3")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    if connection.vendor == "postgresql":
        call_command("flush", interactive=False, verbosity=0)
        call_command("migrate", verbosity=0)  # the roles' groups again
    return connection.vendor


def fill():
    from extproxy.models import ReplayItem, ReplayRun

    nodes = [{"node": f"node-{n:03d}", "backend": "gpu", "kind": "score", "before": n % 10, "after": (n + 3) % 10}
             for n in range(20)]
    counts: dict[str, int] = {}
    run = ReplayRun.objects.create(selector={"filters": {}}, target={"kind": "configured"}, status="done",
                                   total=ITEMS, done=ITEMS)
    batch = []
    for i in range(ITEMS):
        kinds = kinds_of(i)
        for kind in kinds:
            counts[kind] = counts.get(kind, 0) + 1
        blob = zlib.compress(json.dumps({"changed": True, "kinds": {k: 20 for k in kinds}, "nodes": nodes,
                                         "more_nodes": 0, "parts": None}).encode()) if kinds else b""
        batch.append(ReplayItem(run=run, changed=bool(kinds), kinds=kinds, diff_blob=blob))
        if len(batch) == 2000:
            ReplayItem.objects.bulk_create(batch)
            batch = []
    ReplayItem.objects.bulk_create(batch)
    ReplayRun.objects.filter(pk=run.pk).update(changed=sum(1 for i in range(ITEMS) if kinds_of(i)), counts=counts)
    try:  # the kind index (migration 0017): entered as the runner enters them; the same rows before it
        from extproxy.replay.paging import index_kinds
    except ImportError:
        return run, counts
    last = 0
    while True:
        items = list(ReplayItem.objects.filter(run=run, changed=True, pk__gt=last).order_by("pk").only("pk", "run_id", "kinds")[:2000])
        if not items:
            break
        index_kinds(items)
        last = items[-1].pk
    return run, counts


def timed(client, url: str) -> float:
    start = time.perf_counter()
    response = client.get(url)
    elapsed = time.perf_counter() - start
    assert response.status_code == 200, (url, response.status_code, response.content[:300])
    return elapsed * 1000


def main() -> None:
    vendor = setup()
    from django.contrib.auth.models import Group, User
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    run, counts = fill()
    user = User.objects.create_user("bench-dev", password="pw")
    user.groups.add(Group.objects.get(name="developer"))
    client = Client()
    client.force_login(user)
    last = (counts["score"] - 1) // 200 * 200
    changed_last = (sum(1 for i in range(ITEMS) if kinds_of(i)) - 1) // 200 * 200
    cases = [
        ("page, rare kind (outcome)", f"/replays/{run.pk}/?kind=outcome%3Aok-%3Eerror"),
        ("page, common kind, first", f"/replays/{run.pk}/?kind=score"),
        ("page, common kind, last", f"/replays/{run.pk}/?kind=score&offset={last}"),
        ("page, all calls, last", f"/replays/{run.pk}/?offset={ITEMS - 200}"),
        ("page, changed only, last", f"/replays/{run.pk}/?changed=1&offset={changed_last}"),
        ("API, all calls, last", f"/api/replays/{run.pk}/?offset={ITEMS - 200}"),
        ("API, rare kind (outcome)", f"/api/replays/{run.pk}/?kind=outcome%3Aok-%3Eerror"),
        ("API, common kind, last", f"/api/replays/{run.pk}/?kind=score&offset={last}"),
    ]
    samples: dict[str, list[float]] = {name: [] for name, _ in cases}
    for name, url in cases:
        timed(client, url)  # warm
    for _ in range(ROUNDS):
        for name, url in cases:
            samples[name].append(timed(client, url))
    print(f"{vendor}: {ITEMS} items, {sum(1 for i in range(ITEMS) if kinds_of(i))} changed, counts {counts}")
    for name, values in samples.items():
        values.sort()
        print(f"  {name:28s} p50 {statistics.median(values):8.1f} ms   p90 {values[int(len(values) * 0.9)]:8.1f} ms")


if __name__ == "__main__":
    main()
