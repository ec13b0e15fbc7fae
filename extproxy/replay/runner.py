"""Re-runs recorded calls against a target and diffs the decisions.

`Replayer` replays one original at a time: the restored request (bodies.py) goes through an
Engine built for the target (targets.py) exactly as the scheduler's call went through the
proxy (per-backend form: to the backend of that name, the request converted to its mode;
combined form: every backend by the scheduler's rules), the reply is judged by the
recorder's own `build_call` (semantics' judges), and the decisions are diffed (diff.py).
Binds are skipped unless allowed: a replayed bind would bind a real pod.

`run_replay` does a stored ReplayRun: selects the calls (iterated, never all in memory),
replays them at most `rate` per second, records each replay as a Call linked to its original
(`is_replay`, `replay_of`; not published to the live feed), stores a ReplayItem with the diff,
and keeps the run's progress and counts by kind of change, written with each item (storing.py). Memory does not grow with the
number of calls: one call, its replay and its diff at a time.

The event loop is driven from synchronous code (run_until_complete per call), so the ORM is
never used inside the loop.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable


from .. import protocol
from ..bodies import request_of
from ..config import BackendConfig, ProxyConfig, RedactionConfig
from ..nodeindex import NodeSets
from ..backends.base import StreamBroken
from ..recorder import AttemptTracker, NodeDeduper, build_call
from ..recording.rows import MAX_ERROR_TEXT, Undecodable
from ..redaction import bounded_text
from . import diff as diffs
from .cancel import Cancelled, check_cancelled
from .modes import in_mode
from .paging import as_it_stands, in_pages
from .storing import store
from .targets import CaptureRecorder, TargetError, base_backend, replacing

log = logging.getLogger(__name__)

MAX_CALLS_PER_RUN = 100_000
# A replay's Pods are mostly distinct (one per original call; the same Pod again only within one
# scheduling attempt), so the recorder's Pod cache (32 MiB) would only grow with the batch:
# a small one (the repeats of one attempt are close together) keeps a batch's memory level.
# The same holds for the recorder's cache of whole stored request bodies.
REDACTION_CACHE_BYTES = 64 << 10
STORED_BODY_CACHE_BYTES = 64 << 10
PROGRESS_EVERY = 0.5  # seconds between progress saves of a run
# What a recorded call that cannot be decoded (the recorder stored it raw) raises on its way
# through replay: the call's item has the error, the batch goes on.
UNREADABLE = (Undecodable, RecursionError, UnicodeDecodeError)


@dataclass
class Original:
    """A recorded call as replay needs it: from the database or from a fixture."""

    call_id: int | None
    verb: str
    backend: str
    form: str
    request: bytes
    outcome: str
    error: str
    decisions: list[dict]
    hint: dict[str, Any] = field(default_factory=dict)  # what a fixture recorded of the target
    # What redaction (or retention) changed in the request: the target gets those bytes, not the
    # scheduler's; empty when the request is as received.
    marks: list[str] = field(default_factory=list)
    parts: dict[str, tuple[str, str]] | None = None  # a combined call's, as recorded (diff.Side.parts)

    @classmethod
    def from_call(cls, call) -> "Original":
        request = request_of(call)
        marks = [] if request.exact else diffs.kept_marks(request.marks or ["request not as received"])
        parts = diffs.parts_of(call.backend_calls.only("backend", "outcome", "error")) if call.form == "combined" else None
        return cls(call.pk, call.verb, call.backend, call.form, request.data, call.outcome, call.error,
                   call.decisions(), marks=marks, parts=parts)

    @classmethod
    def from_fixture(cls, data: dict[str, Any]) -> "Original":
        from ..copyout import fixture_request_bytes

        call = data["call"]
        hint = dict(data.get("target") or {}, verb=call["verb"])
        # A fixture's redactions: the request's marks, then the response's ("response: ...").
        marks = [str(m) for m in data.get("redactions") or () if not str(m).startswith("response: ")]
        parts = ({str(p["backend"]): (str(p["outcome"]), str(p.get("error") or "")) for p in data["backend_calls"]}
                 if "backend_calls" in data else None)  # copyout.fixture: a combined call's parts
        return cls(call.get("id"), call["verb"], call["backend"], call.get("form", "per-backend"),
                   fixture_request_bytes(data), call["outcome"], call.get("error", ""), data.get("decisions") or [], hint,
                   marks=diffs.kept_marks(marks), parts=parts)


@dataclass
class Result:
    status: str  # "replayed", "skipped", "error"
    original: Original
    diff: diffs.Diff | None = None
    call: Any = None  # the unsaved replay Call (replayed)
    children: list = field(default_factory=list)
    error: str = ""


class Replayer:
    """Replays originals one by one against a target; records nothing itself."""

    def __init__(self, target: dict[str, Any], config: ProxyConfig, allow_bind: bool = False) -> None:
        self.target = target
        self.config = config
        self.allow_bind = allow_bind
        self.loop = asyncio.new_event_loop()
        self._engines: dict[tuple, Any] = {}
        self._capture: dict[tuple, CaptureRecorder] = {}
        self.redaction = config.redaction
        self.nodes = NodeDeduper(config.redaction, redaction_cache_bytes=REDACTION_CACHE_BYTES,
                                 stored_body_bytes=STORED_BODY_CACHE_BYTES)
        self.attempts = AttemptTracker(max_pods=1)
        # Replays are indexed as the recorder indexes calls: a node-filtered export of them is then
        # complete, and `?node=` lists them. Kept per run so a set it stored costs no query again.
        self.node_sets = NodeSets()

    def engine_for(self, original: Original):
        """The engine for this call: the configuration, with the target standing in for the
        call's backend (per-backend) or for `target.replaces` (combined). With `replaces`, a
        per-backend call of another backend goes to that backend as configured (as the
        scheduler's call would now), not to the target. Engines are kept by what stands in for
        which backend, so calls of several backends (a fixture set) each get their own."""
        replaces = self.target.get("replaces")
        if original.form == "combined" and original.hint and self.config.kind == "default":
            # A fixture does not hold the backends of a combined call (only the proxy's URL):
            # the default configuration's built-in policy is not what the scheduler's call met.
            raise TargetError("a combined call's fixture is replayed against the configured backends, and no"
                              " configuration was given: give the one the call was recorded with (--config)")
        if replaces and self.config.backend(replaces) is None and replaces != original.backend:
            configured = sorted(b.name for b in self.config.backends)
            raise TargetError(f"target.replaces: no backend {replaces!r} (configured: {configured})")
        if self.target["kind"] == "configured" or (original.form != "combined" and replaces and replaces != original.backend):
            return self._as_configured(original)
        if original.form == "combined":
            name = replaces or (self.config.backends[0].name if len(self.config.backends) == 1 else "")
            if not name:
                raise TargetError("target.replaces: name the backend the target stands in for in a combined call")
        else:
            name = original.backend
        key = ("target", name)
        if key not in self._engines:
            base = base_backend(self.config, name, original.hint)
            stand_in, policies = replacing(self.target, base, self.config.policies)
            others = tuple(b for b in self.config.backends if b.name != name)
            position = [b.name for b in self.config.backends].index(name) if self.config.backend(name) else len(others)
            backends = others[:position] + (stand_in,) + others[position:]
            config = ProxyConfig(backends=backends, policies={**self.config.policies, **policies},
                                 redaction=self.config.redaction, parallel_filter=self.config.parallel_filter,
                                 source="<replay>", kind="extproxy" if policies or self.config.kind != "default" else "default")
            self._start(key, config)
        return self._engines[key], self._capture[key]

    def _as_configured(self, original: Original):
        """The configuration as it is; a fixture's backend that is not in it is added as the
        fixture recorded it (its URL)."""
        key: tuple = ("configured",)
        config = self.config
        if original.form != "combined" and self.config.backend(original.backend) is None and original.hint.get("url"):
            stand_in = base_backend(self.config, original.backend, original.hint)
            key = ("recorded", stand_in.name, stand_in.url_prefix)
            config = ProxyConfig(backends=self.config.backends + (stand_in,), policies=self.config.policies,
                                 redaction=self.config.redaction, source="<replay>", kind=self.config.kind)
        if key not in self._engines:
            self._start(key, config)
        return self._engines[key], self._capture[key]

    def _start(self, key: tuple, config: ProxyConfig) -> None:
        from ..engine import Engine

        capture = CaptureRecorder()
        self._engines[key] = Engine(config, capture, observes_backends=False)  # type: ignore[arg-type]
        self._capture[key] = capture

    def replay(self, original: Original) -> Result:
        if original.verb == "bind" and not self.allow_bind:
            return Result("skipped", original, error="bind is not replayed unless allowed (it would bind the pod)")
        try:
            engine, capture = self.engine_for(original)
            verb = protocol.Verb(original.verb)
            if original.form == "combined":
                self.loop.run_until_complete(engine.combined(verb, original.request))
            else:
                backend = engine.backends.get(original.backend)
                if backend is None:
                    return Result("error", original, error=f"backend {original.backend!r} is not in the target")
                verb_string = backend.config.verb_string(original.verb)
                if not verb_string:
                    return Result("error", original, error=f"backend {original.backend!r} has no {original.verb} verb")
                body = in_mode(original.request, backend.config, original.verb)
                if isinstance(body, str):
                    return Result("error", original, error=body)
                answer = self.loop.run_until_complete(engine.per_backend(backend, verb, verb_string, body))
                stream = getattr(answer, "stream", None)
                if stream is not None:  # a reply over EXTPROXY_MAX_REPLY_BYTES: recorded once passed on
                    try:
                        self.loop.run_until_complete(_drain(stream))
                    except StreamBroken:
                        pass  # the trace has how the reply broke off (or timed out): judged below
            if not capture.traces:
                return Result("error", original, error="the replay left no trace to judge")
            trace = as_spooled(capture.take())
            call, children = build_call(trace, self.redaction, self.attempts, self.nodes)
        except TargetError as exc:
            return Result("error", original, error=str(exc))
        except UNREADABLE as exc:
            return Result("error", original, error=f"the recorded call cannot be replayed: {type(exc).__name__}: {exc}")
        parts = diffs.parts_of(children) if original.parts is not None else None
        before = diffs.Side(original.backend, original.verb, original.outcome, original.error, original.decisions, original.parts)
        after = diffs.Side(call.backend, call.verb, call.outcome, call.error, call.decisions(), parts)
        return Result("replayed", original, diffs.diff(before, after), call, children)

    def close(self) -> None:
        for engine in self._engines.values():
            self.loop.run_until_complete(engine.close())
        self.loop.close()


def as_spooled(trace):
    """The trace as the recorder gets it from the spool: without the verdicts the combined form's
    chain already made (Trace.verdict is not spooled; the recorder judges each backend's reply
    against the request that backend got). A chain's preempt verdict also names the nodes an
    earlier backend dropped, so judging by it showed every unchanged combined preempt of two
    backends as a change (`added`)."""
    trace.verdict = None
    for child in trace.backend_calls:
        as_spooled(child)
    return trace


async def _drain(stream) -> None:
    async for _ in stream:
        pass


# --- stored runs -----------------------------------------------------------------------------


def select_calls(selector: dict[str, Any]):
    """The calls a selector names, oldest first (a queryset; iterate it, do not list it)."""
    from ..api.filters import filter_calls
    from ..models import Call

    calls = Call.objects.filter(is_replay=False).order_by("started_at", "id")
    if "call" in selector:
        return calls.filter(pk=selector["call"])
    if "calls" in selector:
        return calls.filter(pk__in=list(selector["calls"])[:MAX_CALLS_PER_RUN])
    filters = dict(selector.get("filters") or {})
    if "pod" in selector:
        filters["pod"] = selector["pod"]
    return filter_calls(calls, filters)


def missing_calls(ids: list[int]) -> list[int]:
    """The ids of a `calls` selector that name no recorded call (pruned, mistyped, or a replay's
    own), sorted: a run of the others would pass a gate on fewer calls than it was asked."""
    from ..models import Call

    wanted = set(list(ids)[:MAX_CALLS_PER_RUN])
    found = set(Call.objects.filter(is_replay=False, pk__in=list(wanted)).values_list("pk", flat=True))
    return sorted(wanted - found)


def missing_words(missing: list[int], asked: int, shown: int = 20) -> str:
    """The missing ids in words, at most `shown` of them named."""
    named = ", ".join(str(i) for i in missing[:shown]) + (f" and {len(missing) - shown} more" if len(missing) > shown else "")
    return f"{len(missing)} of the {asked} call ids name no recorded call (pruned or mistyped): {named}"


FIGURES = ("done", "changed", "errors", "skipped", "redacted", "counts")  # what the run counts of its items


class Progress:
    """Counts of a run: written with each item (store), and saved with the run's status at
    most every PROGRESS_EVERY seconds."""

    def __init__(self, run) -> None:
        self.run = run
        self.counts: Counter = Counter(run.counts or {})
        self._saved = 0.0

    def add(self, result: Result) -> None:
        run = self.run
        run.done += 1
        if result.status == "skipped":
            run.skipped += 1
        elif result.status == "error":
            run.errors += 1
        elif result.diff is not None and result.diff.changed:
            run.changed += 1
            for kind in result.diff.kinds:  # calls per kind of change, not nodes
                self.counts[kind] += 1
        if result.status == "replayed" and result.original.marks:
            run.redacted += 1

    def snapshot(self) -> tuple:
        return tuple(getattr(self.run, name) for name in FIGURES[:-1]) + (Counter(self.counts),)

    def restore(self, figures: tuple) -> None:
        for name, value in zip(FIGURES[:-1], figures):
            setattr(self.run, name, value)
        self.counts = figures[-1]

    def write_figures(self) -> None:
        """The run's figures as counted, to its row (in the item's transaction: store)."""
        from ..models import ReplayRun

        self.run.counts = dict(self.counts)
        ReplayRun.objects.filter(pk=self.run.pk).update(**{name: getattr(self.run, name) for name in FIGURES})

    def save(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._saved < PROGRESS_EVERY:
            return
        self._saved = time.monotonic()
        self.run.counts = dict(self.counts)
        fields = ["done", "changed", "errors", "skipped", "redacted", "counts", "total", "status", "started_at", "finished_at"]
        # The run's error is written when the run ends (its own, or none): a save from memory
        # while it goes on would undo what `manage.py redact` wrote to the field meanwhile.
        self.run.save(update_fields=fields + ["error"] if force and self.run.finished_at else fields)


def run_replay(run, config: ProxyConfig | None = None, on_result: Callable[[Result], None] | None = None) -> None:
    """Carry out a stored ReplayRun to the end (in the calling thread)."""
    from django.utils import timezone

    from ..engine import get_engine

    config = config or get_engine().config
    queryset = as_it_stands(select_calls(run.selector))  # the total and the reads: one selection
    run.total = min(queryset.count(), MAX_CALLS_PER_RUN)
    run.status, run.started_at = "running", timezone.now()
    progress = Progress(run)
    progress.save(force=True)
    replayer = Replayer(run.target, config, allow_bind=run.allow_bind)
    interval = 1.0 / run.rate if run.rate and run.rate > 0 else 0.0
    next_at = time.monotonic()
    try:
        for call in in_pages(queryset, MAX_CALLS_PER_RUN):
            if interval and (call.verb != "bind" or run.allow_bind):  # a bind not replayed sends nothing: no turn
                delay = next_at - time.monotonic()
                if delay > PROGRESS_EVERY:  # a slow rate: what is done shows while the run waits
                    progress.save(force=True)
                if delay > 0:
                    check_cancelled(run, delay)  # the rate's wait, cut short by a cancel
                next_at = max(next_at, time.monotonic() - 1.0) + interval  # at most a second of catch-up burst
            check_cancelled(run)  # replay/cancel.py: raises Cancelled once the run is cancelled
            result = replayer.replay(Original.from_call(call))
            store(result, run, replayer.nodes, replayer.node_sets, progress)
            if on_result is not None:
                on_result(result)
            progress.save()
        run.status = "done"
    except Cancelled:  # asked through the API or the dashboard (the run's cancel fields); the items so far stay
        run.status = "failed"
    except Exception as exc:  # the run ends, its progress so far stays; the process goes on
        log.exception("replay run %s failed", run.pk)
        run.status = "failed"
        run.error = bounded_text(f"{type(exc).__name__}: {exc}", config.redaction, MAX_ERROR_TEXT)
    finally:
        replayer.close()
        run.finished_at = timezone.now()
        progress.save(force=True)  # a cancel asked after the last call stays in its own fields
