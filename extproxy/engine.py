"""Runs one verb against the configured backends and returns (answer, Trace).

Per-backend form: the call goes to that one backend and its answer goes back unchanged, same
status and bytes. When the backend gives no answer (refused, reset, timed out), extproxy
answers what makes the scheduler do what it does for a failed call to that backend
(``protocol.encode_failure``: for filter and bind a 200 whose `Error` says what happened, so
the scheduler fails the call with that text and skips an ignorable backend exactly as for a
transport error; for prioritize and preempt, whose replies have no Error field, a 502/504).
The engine holds the backends and the recorder for the process.

May import: the pure core, backends/, combined, the recorder, metrics; Django's settings only
(the engine is built inside the running server).
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Awaitable, Callable, Coroutine

import msgspec
from django.conf import settings

from . import metrics, offload, protocol, semantics
from .aside import aside
from .backends import Backend, Exchange, build_backend
from .backends.base import now, trace_of
from .backends.feed import BodyFeed, FeedBroken
from .combined import Combined
from .config import ProxyConfig, load_config
from .policies import default_policy, parse_policy
from .protocol import Reply, Verb
from .ratelog import RateLimitedLog
from .recording import SpoolRecorder, Trace

log = logging.getLogger(__name__)
_ratelog = RateLimitedLog(log)

# What a malformed request raises while it is decoded: answered 400, never a traceback.
BAD_INPUT = (protocol.ProtocolError, msgspec.DecodeError, RecursionError, UnicodeDecodeError)


@dataclass(slots=True)
class Answer:
    status: int
    body: bytes
    content_type: str = protocol.JSON
    # A reply over EXTPROXY_MAX_REPLY_BYTES: `body` is its first part and `stream` the rest;
    # `length` is the whole length when known (else the server sends it chunked).
    stream: AsyncGenerator[bytes, None] | None = None
    length: int | None = None

    @classmethod
    def of(cls, reply: Reply) -> Answer:
        return cls(reply.status, reply.body, reply.content_type)


def error_text(backend: str, reason: str) -> str:
    return semantics.go_format_safe(f"extproxy: backend {backend}: {reason}")


def failure_answer(verb: Verb, backend: str, exchange: Exchange) -> Answer:
    text = error_text(backend, exchange.error or "no answer")
    return Answer.of(protocol.encode_failure(verb, text, 504 if exchange.timed_out else 502))


class Engine:
    def __init__(self, config: ProxyConfig, recorder: SpoolRecorder, observes_backends: bool = True) -> None:
        self.config = config
        self.recorder = recorder
        # A replay's engine calls targets under the replaced backends' names: its durations are
        # not the production backends' (/metrics), so it observes none.
        self.observes_backends = observes_backends
        if config.kind == "default":
            policies = {name: default_policy() for name in config.policies}
        else:
            policies = {name: parse_policy(name, data) for name, data in config.policies.items()}
        self.backends: dict[str, Backend] = {b.name: build_backend(b, policies) for b in config.backends}
        for backend in self.backends.values():  # their own figures too (replies truncated)
            backend.observed = observes_backends
        self._combined = Combined(self.backends, parallel_filter=config.parallel_filter)
        self.offload_bytes = int(getattr(settings, "EXTPROXY_OFFLOAD_BYTES", 1024 * 1024))
        self._durations: dict[tuple[str, str], object] = {}

    def _backend_duration(self, backend: str, verb: str):
        """The histogram child of (backend, verb): found once, not by its labels on every call."""
        child = self._durations.get((backend, verb))
        if child is None:
            child = self._durations[(backend, verb)] = metrics.BACKEND_DURATION.labels(backend, verb)
        return child

    async def per_backend(self, backend: Backend, verb: Verb, verb_string: str, body: bytes) -> Answer:
        exchange = await backend.exchange(verb, verb_string, body, stream=True)
        return self._answer(backend, verb, body, exchange)

    async def per_backend_fed(self, backend: Backend, verb: Verb, verb_string: str, feed: BodyFeed) -> Answer:
        """per_backend for a request passed on while it arrives (the listener's large requests).

        The answer waits for the request's last byte even when the backend answered before it:
        the scheduler is answered once it has sent its request, and the record has all of it.
        FeedBroken when it never arrives whole: nothing is answered, nothing recorded.
        """
        exchange = await backend.exchange_feed(verb, verb_string, feed, stream=True)
        try:
            await feed.arrived()  # not joined here: the record joins it, in the aside
        except FeedBroken:
            if exchange.rest is not None:
                await exchange.rest.aclose()
            raise
        return self._answer(backend, verb, feed, exchange)

    def _answer(self, backend: Backend, verb: Verb, body: bytes | BodyFeed, exchange: Exchange) -> Answer:
        if exchange.status is None:
            answer = failure_answer(verb, backend.name, exchange)
        else:
            answer = Answer(exchange.status, exchange.body, exchange.content_type or protocol.JSON)
        answered_body = None if exchange.status is not None else answer.body
        if exchange.rest is not None:  # recorded once the rest has been passed on
            answer.stream = self._pass_on(exchange.rest, backend, verb, body, exchange, answer.status, answered_body)
            answer.length = exchange.length
            return answer
        # Recorded once the loop waits on a backend again: nothing of it is the scheduler's answer.
        self._put_aside(backend, verb, body, exchange, answer.status, answered_body)
        return answer

    def _put_aside(self, backend: Backend, verb: Verb, body: bytes | BodyFeed, exchange: Exchange,
                   answered_status: int, answered_body: bytes | None) -> None:
        """The call's bookkeeping, put aside until the next backend call (aside.py). With recording
        off only its duration waits: its bodies are let go now, not held until then."""
        if self.recorder.keeping:
            slot = self._answered(exchange.started_at)
            aside.put(self._record, backend, verb, body, exchange, answered_status, answered_body, slot)
        else:
            aside.put(self._observe, backend.name, verb, exchange.finished_at - exchange.started_at)

    def _answered(self, started: float) -> int:
        """The call is tallied as answered and not yet in the spool (recording/unsettled.py): a
        SIGKILL before its record is built (it waits in the aside) or spooled leaves it counted."""
        recorder = self.recorder
        return recorder.answered(started) if isinstance(recorder, SpoolRecorder) else -1

    def _observe(self, backend: str, verb: Verb, seconds: float) -> None:
        if self.observes_backends:
            self._backend_duration(backend, verb).observe(seconds)

    def _record(self, backend: Backend, verb: Verb, body: bytes | BodyFeed, exchange: Exchange, answered_status: int,
                answered_body: bytes | None, slot: int) -> None:
        self._observe(backend.name, verb, exchange.finished_at - exchange.started_at)
        try:
            # A fed request's parts are joined here, not on the way to the answer.
            request = body if isinstance(body, bytes) else body.joined()
            trace = trace_of(backend.config, verb, request, exchange, answered_status, answered_body)
        except Exception:  # a bug: the call was answered, so its record is counted lost, not just logged
            if not isinstance(self.recorder, SpoolRecorder):
                raise  # a replay's capture, a test's recorder: the caller must see it
            _ratelog.emit(logging.ERROR, "record-build", "recorder: could not build a %s call's record", verb,
                          exc_info=True)
            self.recorder.not_kept("unencodable", exchange.started_at, slot)
            return
        trace.tally_slot = slot
        self.recorder.submit(trace)  # the shadow process finds the call in the spool

    async def _pass_on(self, rest: AsyncGenerator[bytes, None], backend: Backend, verb: Verb, body: bytes | BodyFeed,
                       exchange: Exchange, answered_status: int, answered_body: bytes | None) -> AsyncGenerator[bytes, None]:
        """The rest of a streamed reply (a large one, or one over the bound), then its record
        (the body up to the bound, as the backend's stream completed the exchange). The record,
        and the join of a fed request's parts, wait for the aside: none of it is on the way to
        the answer's first byte, nor after its last one while the scheduler reads it."""
        try:
            async for chunk in rest:
                yield chunk
        finally:
            await rest.aclose()  # when the scheduler went away: the backend connection is dropped
            self._put_aside(backend, verb, body, exchange, answered_status, answered_body)

    async def combined(self, verb: Verb, body: bytes) -> Answer:
        """The combined form: every backend by the scheduler's rules (see combined.py).

        A large request is worked on in the heavy lane (offload.py), off the serving loop.
        """
        if len(body) >= self.offload_bytes:
            return await offload.lane.run(self._combined_here(verb, body))
        return await self._combined_here(verb, body)

    async def _combined_here(self, verb: Verb, body: bytes) -> Answer:
        started = now()
        try:
            reply, children = await self._combined.call(verb, body)
        except BAD_INPUT as exc:  # the request itself: 400 with the reason, one log line per interval
            reason = str(exc) if isinstance(exc, protocol.ProtocolError) else f"{type(exc).__name__}: {exc}"
            _ratelog.emit(logging.WARNING, f"bad-{verb}-{type(exc).__name__}", "combined %s: bad request: %s", verb, reason)
            failure = self._failure(verb, f"bad request: {reason}")
            reply, children = Reply(400, failure.body, failure.content_type), []
        except Exception as exc:  # a bug must cost one call, never the process or its record
            _ratelog.emit(logging.ERROR, f"bug-{verb}-{type(exc).__name__}", "combined %s failed", verb, exc_info=True)
            reply, children = self._failure(verb, f"internal error: {type(exc).__name__}: {exc}"), []
        slot = self._answered(started) if self.recorder.keeping else -1
        self.recorder.submit(
            Trace(
                tally_slot=slot,
                verb=verb,
                backend="combined",
                # The path the scheduler posts to (its urlPrefix ends in /extender): its own error
                # text for a non-200 answer names that URL ("failed preempt with extender at URL ...").
                url="/extender",
                started_at=started,
                finished_at=now(),
                request_body=body,
                status=reply.status,
                response_body=reply.body,
                answered_status=reply.status,
                weight=1,
                form="combined",
                backend_calls=children,
            )
        )
        if children and self.observes_backends:  # each backend's own latency, as per-backend calls have it
            aside.put(self._observe_parts, children)
        return Answer.of(reply)

    def _observe_parts(self, children: list[Trace]) -> None:
        for child in children:
            if not child.not_called:  # nothing was sent: no latency
                self._observe(child.backend, Verb(child.verb), child.finished_at - child.started_at)

    @staticmethod
    def _failure(verb: Verb, reason: str) -> Reply:
        return protocol.encode_failure(verb, semantics.go_format_safe(f"extproxy: {reason}"))

    async def close(self) -> None:
        self._combined.close()
        for backend in self.backends.values():
            await backend.close()


class BackendCall:
    """A per-backend route's call (views.route): with the whole body, or, from the extender
    listener, with a body still arriving (`fed`)."""

    __slots__ = ("engine", "backend", "verb", "verb_string")

    def __init__(self, engine: Engine, backend: Backend, verb: Verb, verb_string: str) -> None:
        self.engine, self.backend, self.verb, self.verb_string = engine, backend, verb, verb_string

    def __call__(self, body: bytes) -> Awaitable[Answer]:
        return self.engine.per_backend(self.backend, self.verb, self.verb_string, body)

    def fed(self, feed: BodyFeed) -> Coroutine[Any, Any, Answer]:
        return self.engine.per_backend_fed(self.backend, self.verb, self.verb_string, feed)

    def begin(self, body: bytes, answered: Callable[[Answer | Coroutine[Any, Any, Answer]], None]) -> bool:
        """The call started now without a task, where its backend can (HTTPBackend.begin):
        `answered` then gets its Answer, or a coroutine that makes it. False: call it as usual."""
        begin = getattr(self.backend, "begin", None)
        if begin is None:
            return False

        def finished(result: Exchange | Coroutine[Any, Any, Exchange]) -> None:
            if not isinstance(result, Exchange):
                answered(self._answer_later(body, result))
                return
            try:
                answer = self.engine._answer(self.backend, self.verb, body, result)
            except Exception as exc:  # a bug: raised where a call's task would have raised it
                answered(_raising(exc))
                return
            answered(answer)

        return bool(begin(self.verb, self.verb_string, body, finished))

    async def _answer_later(self, body: bytes, pending: Coroutine[Any, Any, Exchange]) -> Answer:
        return self.engine._answer(self.backend, self.verb, body, await pending)


async def _raising(exc: Exception) -> Answer:
    raise exc


_engine: Engine | None = None
_engine_lock = threading.Lock()


def get_engine() -> Engine:
    """The process's engine, built from EXTPROXY_CONFIG on first use."""
    global _engine
    if _engine is not None:  # the hot path: no lock once built
        return _engine
    with _engine_lock:
        if _engine is None:
            config = load_config(settings.EXTPROXY_CONFIG or None)
            recorder = SpoolRecorder.from_settings(config.recording)
            _engine = Engine(config, recorder)
            log.info("extproxy: %d backend(s) from %s", len(_engine.backends), config.source)
        return _engine


def set_engine(engine: Engine | None) -> Engine | None:
    """Install another engine (tests, reload); returns the previous one."""
    global _engine
    with _engine_lock:
        previous, _engine = _engine, engine
        return previous
