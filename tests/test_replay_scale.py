"""A batch replay of 10,000 calls runs in constant memory: counted, and measured by tracemalloc
(the peak over the last 8,000 calls against the peak over the first 2,000), not timed."""
from __future__ import annotations

import gc
import json
import os
import socket
import time
import tracemalloc

import pytest

from extproxy.config import RecordingConfig, RedactionConfig, parse_config
from extproxy.models import Call, ReplayItem, ReplayRun
from extproxy.recorder import Recorder, Trace
from extproxy.replay.runner import run_replay
from tests.conftest import fixture_json
from tests.test_combined import failing

CALLS = int(os.environ.get("EXTPROXY_TEST_REPLAY_CALLS", "10000"))
FIRST = CALLS // 5  # the memory in use levels off within the first 2,000 calls (caches filling)


def without_nagle(behaviour):
    """The stdlib server writes headers and body apart; without TCP_NODELAY each answer would
    wait for the client's delayed ACK (about 40 ms)."""

    def behave(handler, body):
        handler.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        behaviour(handler, body)

    return behave


def record_calls(count: int) -> None:
    args = fixture_json("captured-kube-scheduler-1.24/filter-request.nodecache-true.json")
    names = args["NodeNames"]
    response = json.dumps({"NodeNames": names, "FailedNodes": {}, "Error": ""}).encode()
    recorder = Recorder(RecordingConfig(), RedactionConfig())
    now = time.time()
    for start in range(0, count, 1000):
        batch = []
        for i in range(start, min(count, start + 1000)):
            args["Pod"]["metadata"]["name"] = f"pod-{i}"
            args["Pod"]["metadata"]["uid"] = f"uid-{i}"
            batch.append(Trace(
                verb="filter", backend="gpu", url="http://gpu", started_at=now + i / 1000, finished_at=now + i / 1000 + 0.001,
                request_body=json.dumps(args).encode(), status=200, response_body=response, answered_status=200,
                node_cache_capable=True, weight=1,
            ))
        recorder.write_batch(batch)


@pytest.mark.django_db(transaction=True)
def test_it_replays_10000_calls_in_constant_memory(backend_server):
    backend = backend_server({"filter": without_nagle(failing({"gpu-node-1": "cordoned"}))})
    config = parse_config({"backends": [{"name": "gpu", "urlPrefix": backend.url, "filterVerb": "filter",
                                         "nodeCacheCapable": True, "httpTimeout": "5s"}]}, "<test>")
    record_calls(CALLS)
    run = ReplayRun.objects.create(selector={"filters": {"verb": "filter"}}, target={"kind": "configured"}, rate=0)
    peaks: dict[str, int] = {}
    seen = {"n": 0, "received": 0}

    def checkpoint(result) -> None:
        seen["n"] += 1
        # The test backend (in this process) keeps what it receives: count it and let it go,
        # so what is measured is the replay's memory.
        seen["received"] += len(backend.received)
        backend.received.clear()
        if seen["n"] == 10:  # warmed up: pools, caches, first queries
            gc.collect()
            tracemalloc.start()
        elif seen["n"] == FIRST:
            peaks["first"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.reset_peak()

    try:
        run_replay(run, config=config, on_result=checkpoint)
        peaks["rest"] = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    run.refresh_from_db()
    assert run.status == "done" and run.total == run.done == run.changed == CALLS
    assert run.counts == {"passed->failed": CALLS}
    assert ReplayItem.objects.filter(run=run).count() == CALLS
    assert Call.objects.filter(is_replay=True).count() == CALLS
    assert seen["received"] + len(backend.received) == CALLS
    # Four times as many calls again may not need more memory than the first fifth did.
    assert peaks["rest"] <= peaks["first"] * 1.1, peaks
