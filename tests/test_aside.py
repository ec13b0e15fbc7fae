"""Work put aside on the serving loop (extproxy/aside.py): when it runs, and that none is lost.

Through the engine and a real backend on loopback: a call's record is handed to the recorder
while the loop waits for the backend's answer to the next call, not before the call is
answered; and on its own within RUN_WITHIN when no call follows. Then the bounds: at
MAX_WAITING it all runs at once, off the loop's thread it runs at once, and the recorder's
flush and stop run what waits.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time

import pytest

from extproxy import aside as aside_module
from extproxy.aside import Aside, aside
from extproxy.backends.base import Exchange
from extproxy.backends.feed import BodyFeed
from extproxy.backends.http import Expiry
from extproxy.config import load_config
from extproxy.engine import Engine
from extproxy.metrics import REGISTRY
from extproxy.protocol import Verb
from extproxy.recording import SpoolRecorder
from extproxy.recording.spool import SpoolSettings
from tests.conftest import fixture_bytes, reply

REQUEST = fixture_bytes("filter-request.nodecache-true.json")
ANSWER = fixture_bytes("filter-result.nodecache-true.json")


@pytest.fixture
def engine(tmp_path, backend_server):
    """An engine in front of a backend that takes 0.1 s per call and notes how many calls the
    recorder had been handed by the time it answers. The recorder is not started: what it was
    handed stays countable in its hand-off."""
    seen: list[int] = []
    holder: dict[str, Engine] = {}

    def behave(handler, body):
        time.sleep(0.1)  # the backend at work: extproxy's loop waits for it
        seen.append(holder["engine"].recorder.queued)
        reply(200, ANSWER)(handler, body)

    backend = backend_server({"filter": behave})
    path = tmp_path / "extproxy.json"
    path.write_text(json.dumps({"backends": [{"name": "gpu", "urlPrefix": f"{backend.url}/scheduler",
                                              "filterVerb": "filter", "weight": 1, "httpTimeout": "5s",
                                              "nodeCacheCapable": True}]}))
    config = load_config(str(path))
    built = Engine(config, SpoolRecorder(config.recording, SpoolSettings(root=tmp_path / "spool")))
    holder["engine"] = built
    built.seen = seen  # type: ignore[attr-defined]
    yield built
    aside.run_now()


@pytest.fixture
async def bound():
    """The test's loop as the serving loop, as the server's start-up binds it."""
    aside.bind(asyncio.get_running_loop())
    yield aside
    aside.unbind()


async def call(engine: Engine):
    return await engine.per_backend(engine.backends["gpu"], Verb.FILTER, "filter", REQUEST)


async def test_a_calls_record_is_handed_over_while_the_loop_waits_for_the_next_backend_answer(engine, bound, monkeypatch):
    monkeypatch.setattr(aside_module, "RUN_WITHIN", 60.0)  # only the next backend call can run it
    first = await call(engine)
    assert first.status == 200 and first.body == ANSWER
    # Answered, and not yet handed over: the record waits on the loop.
    assert engine.recorder.queued == 0 and aside.waiting == 1

    second = await call(engine)
    assert second.body == ANSWER
    # By the time the backend answered the second call, the first call's record was handed
    # over: it ran once the second request was written, while the loop waited.
    assert engine.seen == [0, 1]
    assert engine.recorder.queued == 1 and aside.waiting == 1
    aside.run_now()
    calls = list(engine.recorder._queue)
    assert [t.backend for t in calls] == ["gpu", "gpu"]
    assert all(t.request_body == REQUEST and t.response_body == ANSWER and t.status == 200 for t in calls)
    assert calls[0].call_id != calls[1].call_id


async def test_with_no_call_after_it_a_record_is_handed_over_within_run_within(engine, bound):
    await call(engine)
    assert engine.recorder.queued == 0 and aside.waiting == 1
    assert engine.recorder.unspooled == 1  # /metrics' queue depth counts it while it waits
    await asyncio.sleep(aside_module.RUN_WITHIN * 10)
    assert engine.recorder.queued == 1 and aside.waiting == 0
    assert engine.recorder.unspooled == 1


async def test_a_record_run_at_the_next_call_leaves_no_timer_that_runs_a_later_one_early(engine, bound, monkeypatch):
    monkeypatch.setattr(aside_module, "RUN_WITHIN", 1.0)
    loop = asyncio.get_running_loop()
    await call(engine)
    first_put = loop.time()  # about when the first record was put aside, and its timer armed
    await asyncio.sleep(0.5)
    await call(engine)  # runs the first record once its request is written; puts the second aside
    second_put = loop.time()
    assert engine.recorder.queued == 1 and aside.waiting == 1
    # Past the first record's timer, well before the second's (RUN_WITHIN after it was put aside):
    # the second still waits for a backend call or its own timer.
    await asyncio.sleep(first_put + aside_module.RUN_WITHIN + 0.15 - loop.time())
    assert engine.recorder.queued == 1 and aside.waiting == 1
    await asyncio.sleep(second_put + aside_module.RUN_WITHIN + 0.2 - loop.time())  # past its own timer
    assert engine.recorder.queued == 2 and aside.waiting == 0


def observations() -> float:
    return REGISTRY.get_sample_value("extproxy_backend_duration_seconds_count", {"backend": "gpu", "verb": "filter"}) or 0


async def test_with_recording_off_only_a_calls_duration_waits_not_its_bodies(engine, bound):
    engine.recorder.recording = dataclasses.replace(engine.recorder.recording, enabled=False)
    observed = observations()
    await call(engine)
    assert aside.waiting == 1 and engine.recorder.unspooled == 0  # a duration, not a record
    # What the loop holds until the next backend call: no body, no exchange (which holds the reply).
    held = [arg for _, args in aside._work for arg in args]
    assert not [arg for arg in held if isinstance(arg, (bytes, Exchange, BodyFeed))], held
    aside.run_now()
    assert observations() == observed + 1  # the duration is still observed
    assert engine.recorder.queued == 0


async def test_the_recorders_flush_takes_what_the_loop_has_put_aside(engine, bound):
    engine.recorder.start()
    try:
        await call(engine)
        assert aside.waiting == 1
        assert engine.recorder.flush(timeout=10)  # on the loop's own thread: runs it here
        assert aside.waiting == 0 and engine.recorder.spooled == 1
    finally:
        assert engine.recorder.stop()


async def test_stopping_the_recorder_spools_what_was_put_aside(engine, bound):
    engine.recorder.start()
    await call(engine)
    assert aside.waiting == 1
    assert engine.recorder.stop()
    assert aside.waiting == 0 and engine.recorder.spooled == 1 and engine.recorder.dropped == 0


def test_the_spool_writer_wakes_for_a_call_handed_over_not_at_its_tick(tmp_path, monkeypatch):
    from extproxy.recording import handoff
    from extproxy.recording.trace import Trace

    monkeypatch.setattr(handoff, "HANDOFF_TICK", 30.0)  # its own tick would come far too late
    recorder = SpoolRecorder(load_config(None).recording, SpoolSettings(root=tmp_path / "spool"))
    recorder.start()
    try:
        time.sleep(0.05)  # the thread is waiting
        trace = Trace(verb="filter", backend="gpu", url="http://b", started_at=1.0, finished_at=2.0,
                      request_body=REQUEST, status=200, response_body=ANSWER, answered_status=200)
        assert recorder.submit(trace)
        deadline = time.monotonic() + 5
        while recorder.spooled == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert recorder.spooled == 1
    finally:
        assert recorder.stop()


def test_the_server_binds_its_loop_at_start_up_and_unbinds_it_when_it_stops(proxy, write_config, backend_server):
    backend = backend_server({"filter": reply(200, ANSWER)})
    server = proxy(write_config({"backends": [{"name": "gpu", "urlPrefix": f"{backend.url}/scheduler",
                                               "filterVerb": "filter", "weight": 1, "nodeCacheCapable": True}]}))
    assert aside.loop is not None and aside.loop.is_running()  # the server's, in its thread
    server.close()
    assert aside.loop is None


async def test_an_engine_off_the_serving_loop_hands_its_record_over_before_answering(engine):
    """A replay's loop, a tool's: nothing would run work put aside there, and a replay judges
    the record as soon as the call returns."""
    await call(engine)
    assert engine.recorder.queued == 1 and aside.waiting == 0


async def test_another_thread_can_run_what_waits_and_a_failing_item_costs_only_itself(caplog):
    ran: list[str] = []
    local = Aside()
    local.bind(asyncio.get_running_loop())

    def boom() -> None:
        raise ValueError("bug")

    local.put(ran.append, "a")
    local.put(boom)
    local.put(ran.append, "b")
    assert ran == []
    worker = threading.Thread(target=local.run_now)
    worker.start()
    worker.join()
    assert ran == ["a", "b"] and local.waiting == 0
    assert "work put aside failed" in caplog.text


async def test_at_the_bound_everything_waiting_runs_at_once(monkeypatch):
    monkeypatch.setattr(aside_module, "MAX_WAITING", 3)
    ran: list[int] = []
    local = Aside()
    local.bind(asyncio.get_running_loop())
    local.put(ran.append, 1)
    local.put(ran.append, 2)
    assert ran == [] and local.waiting == 2
    local.put(ran.append, 3)
    assert ran == [1, 2, 3] and local.waiting == 0


def test_unbound_or_off_the_bound_loops_thread_work_runs_at_once_and_unbinding_runs_what_waits():
    ran: list[str] = []
    local = Aside()
    local.put(ran.append, "unbound")
    assert ran == ["unbound"]

    async def serving() -> None:
        local.bind(asyncio.get_running_loop())
        local.put(ran.append, "on the loop")
        assert ran == ["unbound"]
        worker = threading.Thread(target=asyncio.run, args=(put_on_another_loop(),))
        worker.start()
        worker.join()
        assert ran == ["unbound", "another loop's thread"]
        local.unbind()
        assert ran == ["unbound", "another loop's thread", "on the loop"] and local.waiting == 0
        local.put(ran.append, "after")
        assert ran[-1] == "after"

    async def put_on_another_loop() -> None:
        local.put(ran.append, "another loop's thread")

    asyncio.run(serving())


def test_what_waits_on_a_loop_that_closed_runs_before_the_next_put():
    ran: list[str] = []
    local = Aside()

    async def put_and_leave() -> None:
        local.bind(asyncio.get_running_loop())
        local.put(ran.append, "left behind")
        local._timer.cancel()  # the loop ends before its tick, and nothing unbinds

    asyncio.run(put_and_leave())
    assert ran == []
    local.put(ran.append, "next")
    assert ran == ["left behind", "next"]


async def test_expiry_turns_its_own_cancellation_into_a_timeout_and_lets_others_through():
    loop = asyncio.get_running_loop()

    async def waits(expiry_at: float) -> str:
        expiry = Expiry(loop, expiry_at)
        try:
            await asyncio.sleep(5)
            return "answered"
        except asyncio.CancelledError:
            if not expiry.expired():
                raise
            return "timed out"
        finally:
            expiry.cancel()

    started = time.monotonic()
    assert await waits(loop.time() + 0.05) == "timed out"
    assert 0.04 < time.monotonic() - started < 2

    task = asyncio.create_task(waits(loop.time() + 10))
    await asyncio.sleep(0.01)
    task.cancel()  # someone else's cancellation (the server stopping) must go through
    with pytest.raises(asyncio.CancelledError):
        await task

    expiry = Expiry(loop, loop.time() + 0.01)
    expiry.cancel()
    await asyncio.sleep(0.05)
    assert not expiry.expired()  # cancelled before its time: it never fires
