"""Shadow backends: the shadow process (`manage.py shadow`) sends a copy of each recorded call
of a backend to that backend's shadows and diffs the shadow's decisions against the primary's.

A backend configured with `shadowOf: <primary>` is never part of the scheduler's chain, and the
serving process does nothing for it: every call it answers is in the spool already (for the
recorder), and this process follows the spool (recording/spool_reader.SpoolTail) at low OS
priority, after the scheduler has long been answered. For each record of a primary that has
shadows (a combined call: each of its backends' parts), and never for a bind (it would bind
the pod), it sends the recorded request to each shadow in the shadow's own mode (replay/modes.py)
with the shadow's own timeout, judges both replies as the recorder does (recording.rows.judge,
semantics) and diffs them as replay does (replay/diff.py).

Bounds: at most `concurrency` shadow calls in flight; past that the tail stops reading (the
spool is the queue). A call older than `max_lag` seconds when its turn comes is not sent and
counted as dropped (`stale`), so a slow or dead shadow sheds load and the figures stay recent;
records whose segment the recorder deleted before the tail got there are counted as skipped
(`deleted`). Reading a call's Node objects from the database (names to full objects) is bounded
by EXTPROXY_DB_STATEMENT_DEADLINE as the recorder's writes are: past it that call is dropped
(`database-deadline`), logged at most once a second, and the process goes on; any other database
error there makes that call an `error` and closes the thread's connection (the next call opens a new one). A shadow that gave no answer at all BREAK_AFTER times in a row (down: refused,
reset) is rested, 1 s and doubling up to 30 s while it stays down: its calls meanwhile are
dropped (`shadow-down`) without being decoded or judged, so a dead shadow costs next to nothing. Results are applied in spool order with the tail's position and saved with it
(shadowstats.py), so a restart neither loses nor double-counts a call.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import msgspec

from .backends import Backend, build_backend
from .config import RedactionConfig
from .protocol import Verb
from .ratelog import RateLimitedLog
from .recording.blobs import NodeDeduper, raw_blob
from .recording.deadline import Abandoned, Deadline, DeadlinePassed, close_quietly
from .recording.rows import MAX_ERROR_TEXT, judge, read_request, stored_decisions
from .redaction import Echoes, bounded_text, collecting, echoes, redact_strings
from .recording.spool_reader import SpoolTail, TailItem
from .recording.trace import GAP_RECORD_START, Trace, UnreadableRecord, decode_trace, inflate_record
from .replay import diff as diffs
from .replay.modes import in_mode
from .shadowstats import ShadowState, load_state, save_state

log = logging.getLogger(__name__)
_ratelog = RateLimitedLog(log, interval=1.0)  # a hung database fails every call in flight alike

MIRRORED_VERBS = ("filter", "prioritize", "preempt")  # never bind: it would bind the pod
CONCURRENCY = 8  # shadow calls in flight at once
MAX_LAG = 30.0  # seconds: a call older than this when its turn comes is dropped (stale)
SAVE_EVERY = 0.5  # seconds between state saves while working (and the heartbeat when idle)
READ_BATCH = 64
BREAK_AFTER = 5  # a shadow that gave no answer (refused, reset) this many times in a row is rested
REST_SECONDS = (1.0, 30.0)  # first rest, longest rest (doubling while it stays down)


@dataclass
class Outcome:
    """What one mirrored call (one shadow) came to; applied to the figures in spool order."""

    shadow: str
    primary: str
    result: str  # same | different | error | dropped
    reason: str = ""
    diff: diffs.Diff | None = None
    verb: str = ""
    call_id: str = ""
    at: float = 0.0


@dataclass
class _Step:
    item: TailItem
    tasks: list[asyncio.Task] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)  # decided without a call (dropped, error)
    lag: float | None = None


class _PeekTrace(msgspec.Struct, array_like=True):
    """The head of a spooled Trace (recording/trace.py's positional form): enough to tell
    whose call it is without decoding its bodies (later fields are ignored)."""

    verb: str
    backend: str
    url: str
    started_at: float
    finished_at: float
    request_body: msgspec.Raw
    status: int | None
    response_body: msgspec.Raw
    answered_status: int
    answered_body: msgspec.Raw
    transport_error: str
    timed_out: bool
    node_cache_capable: bool
    weight: int
    form: str


class _PeekRecord(msgspec.Struct, array_like=True):
    format: int
    trace: _PeekTrace


_peek = msgspec.msgpack.Decoder(_PeekRecord).decode


def in_mode_bounded(body: bytes, config: Any, verb: Verb, stop: threading.Event | None = None) -> bytes | str:
    """in_mode (replay/modes.py) on this worker thread, its database reads under
    EXTPROXY_DB_STATEMENT_DEADLINE (recording/deadline.py): a database that takes every byte and
    never answers held the thread for ever, and once every call in flight was held so, the
    whole shadow process. Past the deadline DeadlinePassed is raised and the thread's connection
    is closed (the next read opens a new one); once `stop` (the process's) is set, Abandoned is
    raised at once, so that a SIGTERM does not wait out the deadline. Any other database error
    closes the thread's connection too before it is raised (the call is an `error`): Django
    keeps a broken connection outside a request, so every later read on this thread failed."""
    from django.conf import settings
    from django.db import Error, connections

    wrapper = connections["default"]  # this thread's own: the watchdog shuts its socket
    try:
        with Deadline(settings.EXTPROXY_DB_STATEMENT_DEADLINE, wrapper, stop, "shadow"):
            return in_mode(body, config, verb)
    except (DeadlinePassed, Abandoned, Error):
        close_quietly(wrapper)
        raise


def request_echoes(trace: Trace, rules: RedactionConfig, nodes: NodeDeduper) -> Echoes | None:
    """The values redacting the call's request removes, as the recorder finds them (its stored
    form; by pattern when that cannot be made, as its raw record), apart from the names shown:
    a shadow's reply echoes the same Pod's secrets as the primary's can."""
    with collecting() as removed:
        try:
            nodes.stored_body(trace.request_body)
        except Exception:  # unreadable where it must be redacted: the recorder's raw record
            raw_blob(bytes(trace.request_body), rules)
    nodes.take_batch()  # its Node objects are not kept here
    found = echoes(removed)
    if found is None:
        return None
    ident = read_request(trace)
    return found.apart_from([ident["namespace"], ident["name"], ident["uid"], *ident["nodes"]])


def _side(trace: Trace, rules: RedactionConfig, echo: Echoes | None = None) -> diffs.Side:
    """One side as the recorder would store it: reasons and error texts redacted, the values
    removed from the request too (`echo`; examples of differences are kept in shadow.json and
    shown on the dashboard)."""
    _ident, verdict = judge(trace)

    def error_text(text: str) -> str:
        return bounded_text(text, rules, MAX_ERROR_TEXT) if echo is None else echo.bounded(text, rules, MAX_ERROR_TEXT)

    if trace.timed_out:
        return diffs.Side(trace.backend, trace.verb, "timeout", error_text(trace.transport_error), [])
    if verdict is None:
        return diffs.Side(trace.backend, trace.verb, "error", error_text(trace.transport_error or "no answer"), [])
    decisions = msgspec.to_builtins(stored_decisions(verdict.decisions, rules, echo))  # the diff reads plain objects
    return diffs.Side(trace.backend, trace.verb, verdict.outcome, error_text(verdict.error), decisions)


class Rest:
    """When a shadow that keeps giving no answer is next tried (the breaker; in memory only)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.failures = 0
        self.until = 0.0
        self.seconds = REST_SECONDS[0]

    def resting(self) -> bool:
        return self.clock() < self.until

    def answered(self, answered: bool) -> None:
        if answered:
            self.failures, self.seconds = 0, REST_SECONDS[0]
            return
        self.failures += 1
        if self.failures >= BREAK_AFTER and not self.resting():
            self.until = self.clock() + self.seconds
            self.seconds = min(self.seconds * 2, REST_SECONDS[1])


def configured_shadows(config, policies: dict[str, Any]) -> dict[str, list[Backend]]:
    """Primary name -> its shadow backends, built from a configuration."""
    shadows: dict[str, list[Backend]] = {}
    for shadow in config.shadows:
        shadows.setdefault(shadow.shadow_of, []).append(build_backend(shadow, policies))
    return shadows


class Shadower:
    """Follows the spool under `root` and mirrors each call of a shadowed backend."""

    def __init__(self, root: Path, shadows: dict[str, list[Backend]], concurrency: int = CONCURRENCY,
                 max_lag: float = MAX_LAG, clock: Callable[[], float] = time.time,
                 redaction: RedactionConfig | None = None, stop: threading.Event | None = None) -> None:
        self.root = Path(root)
        self.stop = stop  # the process's: a database read in progress is given up once it is set
        self.shadows = shadows
        self.redaction = redaction or RedactionConfig()
        self._nodes = NodeDeduper(self.redaction)  # its memory of redacted requests (request_echoes)
        self.database_deadlines = 0  # calls not mirrored: their Node objects' read passed the deadline
        self.max_lag = max_lag
        self.clock = clock
        self.state: ShadowState = load_state(self.root)
        for stats in self.state.shadows.values():  # kept under the rules of an earlier start, maybe
            stats.examples = deque(redact_strings(list(stats.examples), self.redaction), maxlen=stats.examples.maxlen)
        for primary, backends in shadows.items():
            for backend in backends:
                self.state.stats(backend.name, primary)
        self.tail = SpoolTail(self.root, self.state.positions)  # where reading stands
        self._committed = dict(self.state.positions)  # where applied results stand: what is saved
        self._slots = asyncio.Semaphore(max(1, concurrency))
        self._rest = {b.name: Rest() for bs in shadows.values() for b in bs}
        self._steps: deque[_Step] = deque()
        self._saved = 0.0
        self._dirty = False  # applied since the last save

    # reading ------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event, until_idle: bool = False) -> None:
        """Follow the spool until `stop` (or, with until_idle, until nothing is left to read and
        every call in flight is done)."""
        self._save()
        while not stop.is_set():
            items = self.tail.read(READ_BATCH)
            for item in items:
                try:
                    await self._take(item)
                except Exception:  # a bug must cost one record, never stop the process on it for good
                    log.exception("shadow: spool record %s/%s passed over", item.writer, item.entry and item.entry.seq)
                self._commit_done()
            self._commit_done()
            if not items:
                if until_idle and not self._steps:
                    break
                # Caught up: show the figures now; otherwise a heartbeat every SAVE_EVERY.
                if (self._dirty and not self._steps) or time.monotonic() - self._saved >= SAVE_EVERY:
                    self._save()
                try:
                    await asyncio.wait_for(stop.wait(), 0.05)
                except asyncio.TimeoutError:
                    pass
            elif time.monotonic() - self._saved >= SAVE_EVERY:
                self._save()
        await self.drain()

    async def drain(self) -> None:
        """Wait for the calls in flight, apply them, save."""
        for step in list(self._steps):
            if step.tasks:
                await asyncio.gather(*step.tasks, return_exceptions=True)
        self._commit_done()
        self._save()

    async def _take(self, item: TailItem) -> None:
        step = _Step(item)
        self._steps.append(step)
        if item.entry is None:
            return
        if item.entry.payload[:1] == bytes((GAP_RECORD_START,)):
            return  # a gap record (the serving process's drop counts): no call in it
        try:
            packed = inflate_record(item.entry.payload)  # once, for the peek and the decode
            peek = _peek(packed)
            if peek.trace.backend not in self.shadows and peek.trace.form != "combined":
                return  # not a shadowed backend's call: its bodies are never decoded
            resting = peek.trace.backend in self.shadows and self._all_resting(peek.trace.backend)
            if resting and peek.trace.verb in MIRRORED_VERBS:
                for shadow in self.shadows[peek.trace.backend]:
                    step.outcomes.append(Outcome(shadow.name, peek.trace.backend, "dropped", reason="shadow-down"))
                return
            trace = decode_trace(packed)
        except (UnreadableRecord, msgspec.DecodeError, msgspec.ValidationError) as exc:  # the recorder counts it; nothing to mirror
            log.debug("shadow: spool record %s/%d unreadable: %s", item.writer, item.entry.seq, exc)
            return
        parts = trace.backend_calls if trace.form == "combined" else [trace]
        for part in parts:
            # A part extproxy did not send (Trace.not_called): no call to mirror; comparing its
            # empty request counted it as a difference or an error.
            if part.verb not in MIRRORED_VERBS or part.not_called:
                continue
            for shadow in self.shadows.get(part.backend, ()):
                await self._slots.acquire()  # the bound: the tail waits here while the shadows are busy
                step.lag = self.clock() - item.entry.at
                reason = "stale" if step.lag > self.max_lag else "shadow-down" if self._rest[shadow.name].resting() else ""
                if reason:
                    self._slots.release()
                    step.outcomes.append(Outcome(shadow.name, part.backend, "dropped", reason=reason))
                    continue
                step.tasks.append(asyncio.create_task(self._mirror(shadow, part, trace.call_id)))

    def _all_resting(self, primary: str) -> bool:
        return all(self._rest[s.name].resting() for s in self.shadows[primary])

    # one mirrored call ----------------------------------------------------------------------------
    async def _mirror(self, shadow: Backend, trace: Trace, call_id: str) -> Outcome:
        try:
            return await self._compare(shadow, trace, call_id)
        except Exception as exc:  # one bad call must not stop the shadows
            log.exception("shadow: mirroring a %s call to %s failed", trace.verb, shadow.name)
            return Outcome(shadow.name, trace.backend, "error", reason=f"{type(exc).__name__}")
        finally:
            self._slots.release()

    async def _compare(self, shadow: Backend, trace: Trace, call_id: str) -> Outcome:
        verb = Verb(trace.verb)
        verb_string = shadow.config.verb_string(verb)
        if not verb_string:
            return Outcome(shadow.name, trace.backend, "error", reason="no such verb")
        # Names to full objects reads the node store: a database query, off the event loop.
        try:
            body = await asyncio.to_thread(in_mode_bounded, trace.request_body, shadow.config, verb, self.stop)
        except Abandoned:  # stopping: not mirrored, and not counted against the database
            return Outcome(shadow.name, trace.backend, "dropped", reason="stopping")
        except DeadlinePassed as exc:
            self.database_deadlines += 1
            _ratelog.emit(logging.ERROR, "database-deadline", "shadow: a %s call to %s not mirrored (%d so far): "
                          "reading its Node objects: %s", trace.verb, shadow.name, self.database_deadlines, exc)
            return Outcome(shadow.name, trace.backend, "dropped", reason="database-deadline")
        if isinstance(body, str):
            return Outcome(shadow.name, trace.backend, "error", reason=body)
        exchange = await shadow.exchange(verb, verb_string, body)
        self._rest[shadow.name].answered(exchange.status is not None or exchange.timed_out)  # slow is not down
        copy = Trace(
            verb=trace.verb, backend=trace.backend, url=shadow.url_for(verb_string), started_at=exchange.started_at,
            finished_at=exchange.finished_at, request_body=body, status=exchange.status, response_body=exchange.body,
            answered_status=exchange.status or 0, transport_error=exchange.error, timed_out=exchange.timed_out,
            node_cache_capable=shadow.config.node_cache_capable, weight=shadow.config.weight or trace.weight,
            verb_string=verb_string,
        )
        echo = request_echoes(trace, self.redaction, self._nodes)
        result = diffs.diff(_side(trace, self.redaction, echo), _side(copy, self.redaction, echo))
        return Outcome(shadow.name, trace.backend, "different" if result.changed else "same", diff=result,
                       verb=trace.verb, call_id=call_id, at=self.clock())

    # applying, in spool order ------------------------------------------------------------------------
    def _commit_done(self) -> None:
        while self._steps and all(t.done() for t in self._steps[0].tasks):
            step = self._steps.popleft()
            for outcome in step.outcomes + [t.result() for t in step.tasks]:
                self._apply(outcome)
            if step.item.skipped:
                self.state.skipped["deleted"] = self.state.skipped.get("deleted", 0) + step.item.skipped
            if step.lag is not None:
                self.state.lag_seconds = step.lag
            self._committed[step.item.writer] = step.item.position
            self._dirty = True

    def _apply(self, outcome: Outcome) -> None:
        stats = self.state.stats(outcome.shadow, outcome.primary)
        if outcome.result == "dropped":
            stats.dropped[outcome.reason] = stats.dropped.get(outcome.reason, 0) + 1
            return
        if outcome.result == "error":
            stats.errors += 1
            return
        stats.calls += 1
        if outcome.result == "same" or outcome.diff is None:
            return
        stats.different += 1
        for kind, n in outcome.diff.kinds.items():
            stats.kinds[kind] = stats.kinds.get(kind, 0) + 1
        stats.examples.appendleft({
            "at": outcome.at, "verb": outcome.verb, "call_id": outcome.call_id, "kinds": dict(outcome.diff.kinds),
            "outcome": outcome.diff.outcome, "winner": outcome.diff.winner, "nodes": outcome.diff.nodes[:10],
        })

    def _save(self) -> None:
        self._saved, self._dirty = time.monotonic(), False
        saved = ShadowState(dict(self._committed), self.state.shadows, self.state.skipped, self.state.lag_seconds)
        try:
            save_state(self.root, saved)
        except OSError as exc:
            log.warning("shadow: state not saved: %s", exc)

    async def close(self) -> None:
        self.tail.close()
        for backend in (b for bs in self.shadows.values() for b in bs):
            await backend.close()
