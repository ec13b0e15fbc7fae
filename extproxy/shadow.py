"""Shadow backends: a copy of every call of a backend goes to its shadows, off the hot path,
and the shadow's decisions are diffed against the primary's.

A backend configured with `shadowOf: <primary>` is never part of the scheduler's chain. After
the engine has built the primary's answer, `Mirror.offer` puts the call's Trace in a bounded
queue (a non-blocking put; nothing else happens on the hot path). One worker thread with its own
event loop takes calls from the queue, sends each to the primary's shadows (in the shadow's
mode; never a bind, which would bind a pod), judges both replies as the scheduler would
(recorder.judge, semantics) and diffs them (replay/diff.py). When the queue is full the call
is dropped for the shadows and counted: a slow or dead shadow never slows the primary.

Results are counted per shadow (same, different, error, dropped) in /metrics and in `stats`
(this process), with the latest differing calls as examples for the dashboard. Shadow calls
are not recorded as calls.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import msgspec

from . import metrics
from .backends import Backend
from .protocol import Verb
from .recorder import Trace, judge
from .replay import diff as diffs
from .replay.modes import in_mode

log = logging.getLogger(__name__)

QUEUE_SIZE = 1000  # calls waiting for the shadows; more are dropped (and counted)
CONCURRENCY = 8  # shadow calls in flight at once
EXAMPLES = 20  # latest differing calls kept per shadow
MIRRORED_VERBS = ("filter", "prioritize", "preempt")  # never bind: it would bind the pod


@dataclass
class ShadowStats:
    shadow: str
    primary: str
    calls: int = 0  # compared
    different: int = 0
    errors: int = 0  # no comparison possible (the shadow lacks the verb, the request could not be converted)
    dropped: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    examples: deque = field(default_factory=lambda: deque(maxlen=EXAMPLES))

    def to_json(self) -> dict[str, Any]:
        return {
            "shadow": self.shadow, "primary": self.primary, "calls": self.calls, "different": self.different,
            "errors": self.errors, "dropped": self.dropped,
            "different_rate": round(self.different / self.calls, 4) if self.calls else 0.0,
            "kinds": dict(sorted(self.kinds.items())), "examples": list(self.examples),
        }


def _side(trace: Trace, backend: str) -> diffs.Side:
    ident, verdict = judge(trace)
    if trace.timed_out:
        return diffs.Side(backend, trace.verb, "timeout", trace.transport_error, [])
    if verdict is None:
        return diffs.Side(backend, trace.verb, "error", trace.transport_error or "no answer", [])
    decisions = msgspec.to_builtins(verdict.decisions)  # the diff reads decisions as stored: plain objects
    return diffs.Side(backend, trace.verb, verdict.outcome, verdict.error, decisions)


class Mirror:
    """The shadows of every primary, the bounded queue and the worker that feeds them."""

    def __init__(self, shadows: dict[str, list[Backend]], queue_size: int | None = None) -> None:
        self.shadows = shadows  # primary name -> its shadow backends
        self.stats = {s.name: ShadowStats(s.name, primary) for primary, ss in shadows.items() for s in ss}
        self._queue: queue.Queue[Trace] = queue.Queue(maxsize=queue_size or QUEUE_SIZE)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stop = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending = 0  # queued or being mirrored
        self._idle = threading.Condition(self._lock)

    # hot path ---------------------------------------------------------------------------------
    def offer(self, trace: Trace) -> None:
        """Queue a copy of the call for the primary's shadows; never blocks, never raises."""
        shadows = self.shadows.get(trace.backend)
        if not shadows or trace.verb not in MIRRORED_VERBS:
            return
        with self._lock:
            try:
                self._queue.put_nowait(trace)
            except queue.Full:
                for shadow in shadows:
                    self.stats[shadow.name].dropped += 1
                    metrics.SHADOW_DROPPED.labels(shadow.name).inc()
                return
            self._pending += 1
        if self._thread is None:
            self._start()

    # worker ------------------------------------------------------------------------------------
    def _start(self) -> None:
        with self._lock:
            if self._thread is None and not self._stop:
                self._thread = threading.Thread(target=self._run, name="extproxy-shadow", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        while not self._stop:
            try:
                first = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            batch = [first]
            while len(batch) < CONCURRENCY:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._loop.run_until_complete(self._mirror_all(batch))
            except Exception:  # one bad call must not stop the shadows
                log.exception("shadow: mirroring %d call(s) failed", len(batch))
            with self._idle:
                self._pending -= len(batch)
                self._idle.notify_all()
        for shadow in (s for ss in self.shadows.values() for s in ss):
            self._loop.run_until_complete(shadow.close())
        self._loop.close()

    async def _mirror_all(self, batch: list[Trace]) -> None:
        await asyncio.gather(*(self._mirror(trace) for trace in batch))

    async def _mirror(self, trace: Trace) -> None:
        await asyncio.gather(*(self._one(shadow, trace) for shadow in self.shadows[trace.backend]))

    async def _one(self, shadow: Backend, trace: Trace) -> None:
        stats = self.stats[shadow.name]
        verb = Verb(trace.verb)
        verb_string = shadow.config.verb_string(verb)
        body = in_mode(trace.request_body, shadow.config, verb) if verb_string else "no such verb"
        if isinstance(body, str):
            stats.errors += 1
            metrics.SHADOW_CALLS.labels(shadow.name, "error").inc()
            return
        exchange = await shadow.exchange(verb, verb_string, body)
        copy = Trace(
            verb=trace.verb, backend=trace.backend, url=shadow.url_for(verb_string), started_at=exchange.started_at,
            finished_at=exchange.finished_at, request_body=body, status=exchange.status, response_body=exchange.body,
            answered_status=exchange.status or 0, transport_error=exchange.error, timed_out=exchange.timed_out,
            node_cache_capable=shadow.config.node_cache_capable, weight=shadow.config.weight or trace.weight,
            verb_string=verb_string,
        )
        result = diffs.diff(_side(trace, trace.backend), _side(copy, trace.backend))
        stats.calls += 1
        if not result.changed:
            metrics.SHADOW_CALLS.labels(shadow.name, "same").inc()
            return
        stats.different += 1
        metrics.SHADOW_CALLS.labels(shadow.name, "different").inc()
        for kind in result.kinds:
            stats.kinds[kind] = stats.kinds.get(kind, 0) + 1
        stats.examples.appendleft({
            "at": time.time(), "verb": trace.verb, "kinds": dict(result.kinds), "outcome": result.outcome,
            "winner": result.winner, "nodes": result.nodes[:10],
        })

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """True once every queued call has been mirrored (tests, benchmarks)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def stop(self) -> None:
        self._stop = True
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None


def shadow_mirror(config, policies: dict[str, Any]) -> Mirror | None:
    """The Mirror for a configuration's shadow backends (None when it has none)."""
    from .backends import build_backend

    if not config.shadows:
        return None
    shadows: dict[str, list[Backend]] = {}
    for shadow in config.shadows:
        shadows.setdefault(shadow.shadow_of, []).append(build_backend(shadow, policies))
    return Mirror(shadows)


def current_stats(mirror: Mirror | None) -> list[dict[str, Any]]:
    """A mirror's figures (the engine's: this process), for the dashboard and the API."""
    from datetime import datetime, timezone

    rows = [s.to_json() for s in mirror.stats.values()] if mirror is not None else []
    for row in rows:
        row["percent"] = f"{row['different_rate'] * 100:.1f}%"
        for example in row["examples"]:
            example["at_text"] = datetime.fromtimestamp(example["at"], timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return rows
