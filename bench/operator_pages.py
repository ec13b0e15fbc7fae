"""What the pages an on-call operator opens for "why is this pod Pending?" weigh and cost,
with real-sized traffic (a benchmark, not a test).

A real extproxy (serving process and recorder, SQLite or PostgreSQL with DATABASE_URL) in front
of three loopback filter extenders that fail different nodes for different reasons. It is sent
kube-scheduler 1.24's captured full-object filter request grown to OPS_NODES Node objects
(bench/run.py's make_nodes), once in the combined form and once per backend, and OPS_CALLS
names-only filter calls for one pod in the combined form. Then, logged in as admin, each page is
fetched OPS_ROUNDS times over loopback: its size and the median time from request to the last
byte (loopback: the server's time plus a copy).

    .venv/bin/python bench/operator_pages.py
    DATABASE_URL=postgresql://... .venv/bin/python bench/operator_pages.py
"""
from __future__ import annotations

import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("EXTPROXY_SKIP_CONFIG_CHECK", "1")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "extproxy.settings")
import django  # noqa: E402

django.setup()  # tests.conftest reads the settings

from bench.run import make_nodes  # noqa: E402
from tests.conftest import BackendServer, fixture_json  # noqa: E402
from tests.processes import Installation  # noqa: E402
from tests.test_combined import backend, failing  # noqa: E402

NODES = int(os.environ.get("OPS_NODES", "5000"))
CALLS = int(os.environ.get("OPS_CALLS", "300"))
ROUNDS = int(os.environ.get("OPS_ROUNDS", "5"))
CAPTURED = "captured-kube-scheduler-1.24/"


def names(every: int, start: int = 0) -> list[str]:
    return [f"node-{i:05d}" for i in range(1 + start, NODES + 1, every)]


def main() -> None:
    full = fixture_json(CAPTURED + "filter-request.nodecache-false.json")
    full["Nodes"]["items"] = make_nodes(full["Nodes"]["items"], NODES)
    full["NodeNames"] = None
    big = json.dumps(full).encode()
    small = fixture_json(CAPTURED + "filter-request.nodecache-true.json")
    small["NodeNames"] = [f"node-{i:05d}" for i in range(1, 201)]
    small["Pod"]["metadata"]["name"] = "retried"
    servers = {
        "gpu": BackendServer({"filter": failing({n: "gpu: all 8 devices busy" for n in names(3)})}),
        "zone": BackendServer({"filter": failing({n: "zone: pod wants eu-west-1a" for n in names(5, 1)})}),
        "disk": BackendServer({"filter": failing({}, {n: "disk: no local SSD left" for n in names(7, 2)})}),
    }
    config = json.dumps({"backends": [backend(name, s, filterVerb="filter", httpTimeout="60s") for name, s in servers.items()]})
    with tempfile.TemporaryDirectory() as tmp:
        inst = Installation(Path(tmp), config, os.environ.get("DATABASE_URL"))
        try:
            inst.manage("migrate", "--noinput")
            inst.manage("bootstrap")
            inst.start_serving()
            inst.start_recorder()
            for path in ("/extender/filter", "/extender/gpu/filter"):
                answer = requests.post(inst.url + path, data=big, timeout=120)
                assert answer.status_code == 200, answer.text[:300]
            for _ in range(CALLS):
                requests.post(inst.url + "/extender/filter", data=json.dumps(small).encode(), timeout=30)
            inst.wait_drained(600)
            measure(inst, full["Pod"]["metadata"])
        finally:
            inst.close()
            for s in servers.values():
                s.close()


def measure(inst: Installation, pod: dict) -> None:
    session = requests.Session()
    login = session.get(inst.url + "/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
    session.post(inst.url + "/accounts/login/", data={"username": "admin", "password": "s3cret",
                                                      "csrfmiddlewaretoken": token}, headers={"Referer": inst.url})
    token = requests.post(inst.url + "/api/auth/token/", json={"username": "admin", "password": "s3cret"},
                          timeout=30).json()["token"]
    api = {"Authorization": f"Token {token}"}
    listing = requests.get(inst.url + "/api/calls/?page_size=500", headers=api, timeout=60).json()
    assert "results" in listing, listing
    calls = listing["results"]
    big = [c for c in calls if c["node_count"] == NODES]
    combined = next(c for c in big if c["backend"] == "combined")
    single = next(c for c in big if c["backend"] != "combined")
    detail = requests.get(inst.url + f"/api/calls/{combined['id']}/", headers=api, timeout=60).json()
    parts = [p["id"] for p in detail.get("backend_calls") or detail.get("parts") or []]
    pages = {
        "live feed": "/",
        "feed history (calls)": "/feed/calls/",
        "feed history (attempts)": "/feed/attempts/",
        "feed, node filter": "/feed/calls/?node=node-00004",
        "combined call page": f"/calls/{combined['id']}/",
        "combined call page, node search": f"/calls/{combined['id']}/?node=node-04997",
        "combined call, request opened": f"/calls/{combined['id']}/?body=request",
        "per-backend call page": f"/calls/{single['id']}/",
        "pod page (full-object pod)": f"/pods/{pod['namespace']}/{pod['name']}/",
        "pod page (pod, %d calls)" % CALLS: f"/pods/{pod['namespace']}/retried/",
        "backends page": "/backends/",
    }
    for part in parts:
        pages[f"part {part} request (API)"] = f"/api/calls/{combined['id']}/backend-calls/{part}/request"
    print(f"{NODES} nodes, {CALLS} calls for one pod, database {os.environ.get('DATABASE_URL', 'sqlite')[:10]}")
    print(f"{'page':38} {'bytes':>10} {'median ms':>10} {'max ms':>8}")
    for name, path in pages.items():
        times, size = [], 0
        for _ in range(ROUNDS):
            start = time.perf_counter()
            answer = session.get(inst.url + path, timeout=300)
            times.append((time.perf_counter() - start) * 1000)
            assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
            size = len(answer.content)
        print(f"{name:38} {size:>10} {statistics.median(times):>10.0f} {max(times):>8.0f}")


if __name__ == "__main__":
    main()
