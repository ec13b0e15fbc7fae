"""A pod's story from one scheduling attempt: the chain of backend calls as the scheduler ran it,
whether the pod is bound (to which node, by whom) or pending, and one sentence why.

The scheduler's rules come from extproxy.semantics (the filter chain with its ignorable and
last-writer-wins rules); this module only feeds it recorded verdicts. What the scheduler does
not count is not counted here either: an ignorable backend's failure is a skipped step, a
prioritize failure drops scores and blocks nothing. The scheduler's own words (its events, a
binding seen through the API) override what the extender calls alone suggest.

Pure reading of rows handed in: no queries here (dashboard/queries.py loads what is needed).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping, Sequence

from extproxy.bodies import not_called_reason
from extproxy.config import BackendConfig
from extproxy.models import _decisions
from extproxy.semantics import FilterChain, Outcome, Verdict, bind_fallthrough, choose_binder

from .records import decisions_reusing

#: How long after its last call an attempt with feasible nodes and no bind counts as running.
IN_PROGRESS_GRACE = timedelta(seconds=30)
#: Scheduler events a little before the attempt's first call still belong to it (clock skew).
EVENT_SLACK = timedelta(seconds=2)


@dataclass
class Step:
    """One backend's part in the attempt, as the scheduler took it."""

    verb: str
    backend: str
    call_id: int
    started_at: datetime
    duration_ms: float
    outcome: str  # the recorded outcome: ok, error, timeout
    counted: str  # what the scheduler made of it: ok, skipped, error, dropped, fell-through, bound
    detail: str = ""  # e.g. "2/5 passed", "scored 2 nodes"
    rejection: tuple[str, str] | None = None  # (node, reason) of the first node it rejected
    error: str = ""
    ignorable: bool = False
    not_called: bool = False  # a combined call's part extproxy never sent (`error` says why)


@dataclass
class Story:
    state: str  # "bound", "pending", "in progress", "unconfirmed", "unknown"
    sentence: str
    group: str = ""  # the sentence with numbers folded: pods pending for the same reason share it
    node: str | None = None
    bound_by: str = ""
    steps: list[Step] = field(default_factory=list)
    feasible: int | None = None  # nodes left after the extender filters
    total: int | None = None
    scheduler_says: list[Any] = field(default_factory=list)  # SchedulerEvents of this attempt
    reasons: list[tuple[int, str]] = field(default_factory=list)  # counted as the scheduler counts


def _ms(started: datetime, finished: datetime) -> float:
    return round((finished - started).total_seconds() * 1000, 1)


def _config(backends: Mapping[str, BackendConfig], name: str) -> BackendConfig:
    # A backend no longer configured is taken as the scheduler's default: not ignorable.
    return backends.get(name) or BackendConfig(name=name)


def _verdict(outcome: str, decisions: list[dict]) -> Verdict | None:
    if outcome != "ok":
        return None
    return Verdict(
        outcome=Outcome.OK, error="", decisions=[], findings=[],
        passed=[d["node"] for d in decisions if d["result"] == "passed"],
        failed={d["node"]: d.get("reason") or "" for d in decisions if d["result"] == "failed" and d.get("reason")},
        unresolvable={d["node"]: d.get("reason") or "" for d in decisions if d["result"] == "unresolvable"},
    )


def _first_rejection(decisions: list[dict]) -> tuple[str, str] | None:
    for d in decisions:
        if d["result"] in ("failed", "unresolvable"):
            return d["node"], d.get("reason") or "(removed without a reason)"
    return None


def children_of(call: Any) -> list:
    """A combined call's backend calls, as dashboard.queries.attempt_calls attached them."""
    found = getattr(call, "children", None)
    return list(call.backend_calls.all()) if found is None else found


@dataclass
class _Source:
    """A per-backend call, or one backend call inside a combined call."""

    verb: str
    backend: str
    call_id: int
    started_at: datetime
    finished_at: datetime
    outcome: str
    error: str
    decisions: list[dict]
    node_count: int
    not_called: bool = False


def latest_per_backend(calls: Sequence[Any], verb: str) -> list[Any]:
    """The last call of `verb` per backend, in the order the scheduler made them."""
    last: dict[str, Any] = {}
    for c in sorted(calls, key=lambda c: (c.started_at, c.id)):
        if c.verb == verb:
            last[c.backend] = c
    return sorted(last.values(), key=lambda c: (c.started_at, c.id))


def sources(calls: Sequence[Any], verb: str) -> list[_Source]:
    """The backend calls of `verb` in the attempt, in the order made: a combined call's
    children (the newest combined call wins), else the newest per-backend call of each backend."""
    combined = [c for c in calls if c.verb == verb and c.form == "combined"]
    if combined:
        parent = max(combined, key=lambda c: (c.started_at, c.id))
        out = []
        for child in sorted(children_of(parent), key=lambda b: (b.started_at, b.id)):
            out.append(_Source(child.verb, child.backend, parent.id, child.started_at, child.finished_at,
                               child.outcome, child.error, _decisions(child.decisions_blob), parent.node_count,
                               bool(not_called_reason(child))))
        return out
    return [
        _Source(c.verb, c.backend, c.id, c.started_at, c.finished_at, c.outcome, c.error,
                [d for d in decisions_reusing(c) if (d.get("backend") or c.backend) == c.backend], c.node_count)
        for c in latest_per_backend([c for c in calls if c.form != "combined"], verb)
    ]


def filter_chain(calls: Sequence[Any], backends: Mapping[str, BackendConfig]) -> tuple[list[Step], FilterChain | None, int]:
    """The attempt's filter calls fed to the scheduler's chain: (steps, the chain, nodes it started with)."""
    found = sources(calls, "filter")
    if not found:
        return [], None, 0
    first = next((s for s in found if s.decisions), None)
    names = [d["node"] for d in first.decisions] if first else [f"#{i}" for i in range(found[0].node_count)]
    # An undecodable request has no node list: one stand-in, so the chain still reads its error.
    chain = FilterChain(names or ["(nodes unknown)"])
    steps = []
    for source in found:
        config = _config(backends, source.backend)
        step = Step("filter", source.backend, source.call_id, source.started_at,
                    _ms(source.started_at, source.finished_at), source.outcome, "", error=source.error,
                    ignorable=config.ignorable, rejection=_first_rejection(source.decisions),
                    not_called=source.not_called)
        if chain.done:
            step.counted = "not counted"  # the scheduler had stopped: no call of its made this
        else:
            chain.apply(config, _verdict(source.outcome, source.decisions), source.error or source.outcome)
            # a failed call ends the chain in error, unless its backend is ignorable: then skipped
            step.counted = "ok" if source.outcome == "ok" else ("error" if chain.error else "skipped")
        if source.outcome == "ok":
            passed = sum(1 for d in source.decisions if d["result"] == "passed")
            step.detail = f"{passed}/{len(source.decisions)} passed"
        steps.append(step)
    return steps, chain, len(names)


def _score_steps(calls: Sequence[Any]) -> list[Step]:
    steps = []
    for s in sources(calls, "prioritize"):
        scored = sum(1 for d in s.decisions if d["result"] == "scored")
        counted = "ok" if s.outcome == "ok" else "dropped"  # the scheduler ignores a failed prioritize
        steps.append(Step("prioritize", s.backend, s.call_id, s.started_at, _ms(s.started_at, s.finished_at),
                          s.outcome, counted, f"scored {scored} node(s)" if s.outcome == "ok" else "scores dropped",
                          error=s.error, not_called=s.not_called))
    return steps


def _preempt_steps(calls: Sequence[Any], backends: Mapping[str, BackendConfig]) -> list[Step]:
    steps = []
    for s in sources(calls, "preempt"):
        ignorable = _config(backends, s.backend).ignorable
        counted = "ok" if s.outcome == "ok" else ("skipped" if ignorable else "error")
        steps.append(Step("preempt", s.backend, s.call_id, s.started_at, _ms(s.started_at, s.finished_at),
                          s.outcome, counted, error=s.error, ignorable=ignorable, not_called=s.not_called))
    return steps


def fold_numbers(text: str) -> str:
    return re.sub(r"\d+", "N", text)


def no_node_sentence(total: int, failed: Mapping[str, str], unresolvable: Mapping[str, str]) -> tuple[str, list]:
    """The scheduler's FitError text for what the extenders left: identical reasons counted
    together, the "<count> <reason>" strings sorted as Go's sort.Strings does."""
    counts = Counter(list(failed.values()) + list(unresolvable.values()))
    parts = sorted(f"{n} {reason}" for reason, n in counts.items())
    text = f"0/{total} nodes are available" + (": " + ", ".join(parts) if parts else "") + "."
    return text, sorted(((n, r) for r, n in counts.items()), key=lambda x: f"{x[0]} {x[1]}")


def tell(
    calls: Sequence[Any],
    backends: Mapping[str, BackendConfig],
    events: Iterable[Any] = (),
    now: datetime | None = None,
    bound_node_of=None,
    pod: dict | None = None,
    watching: bool = False,
) -> Story:
    """The story of one attempt (`calls` with decisions loaded; `events`: the pod's scheduler
    events, any order; `bound_node_of(call)`: the node a bind call's request names)."""
    calls = sorted(calls, key=lambda c: (c.started_at, c.id))
    start = calls[0].started_at
    end = max(c.finished_at for c in calls)
    filter_steps, chain, started_with = filter_chain(calls, backends)
    steps = filter_steps + _score_steps(calls) + _preempt_steps(calls, backends)
    story = Story(state="unknown", sentence="")
    ours = [e for e in events if e.at >= start - EVENT_SLACK]
    story.scheduler_says = sorted(ours, key=lambda e: e.at)

    binds = sorted((c for c in calls if c.verb == "bind"), key=lambda c: (c.started_at, c.id))
    bound_by = ""
    for c in binds:
        step, by = _bind_step(c, backends)
        steps.append(step)
        if step.counted == "bound":
            story.node = bound_node_of(c) if bound_node_of else None
            bound_by = by
    story.steps = sorted(steps, key=lambda s: (s.started_at, s.call_id))

    if chain is not None:
        result = chain.result()
        story.total = started_with
        story.feasible = len(result.passed)
    if bound_by:
        story.state, story.bound_by = "bound", bound_by
        story.sentence = f"Bound to {story.node or 'a node'} by {bound_by}."
        return story
    seen = [e for e in story.scheduler_says if e.kind in ("Scheduled", "Bound")]
    if seen:
        e = seen[-1]
        story.state, story.node = "bound", e.node or None
        story.bound_by = "the scheduler (its Scheduled event)" if e.kind == "Scheduled" else "the API (spec.nodeName seen)"
        story.sentence = f"Bound to {e.node or 'a node'}, as {story.bound_by} shows."
        return story
    return _why_pending(story, calls, chain, backends, now or end, end, pod, watching)


def _bind_step(call: Any, backends: Mapping[str, BackendConfig]) -> tuple[Step, str]:
    if call.form == "combined":
        children = sorted(children_of(call), key=lambda b: (b.started_at, b.id))
        extender = next((b for b in children if b.outcome == "ok"), None)
        by = f"extender binder {extender.backend}" if extender else "the Kubernetes API (extproxy's combined bind)"
        counted = "bound" if call.outcome == "ok" else "error"
        if counted == "error" and extender is None:
            # A non-ignorable binder's failure is the answer's error (extproxy binds through the
            # API only after an ignorable one failed): the step is that binder's, so the story
            # does not send the operator to extproxy's API access for a backend's refusal.
            extender = next((b for b in children if not _config(backends, b.backend).ignorable), None)
        step = Step("bind", extender.backend if extender else "combined", call.id, call.started_at,
                    _ms(call.started_at, call.finished_at), call.outcome, counted, error=call.error)
        return step, by if counted == "bound" else ""
    config = _config(backends, call.backend)
    ignorable = config.ignorable
    verdict = Verdict(outcome=call.outcome, error=call.error, decisions=[], findings=[])
    # bound; error (the pod is requeued); default-binder: an ignorable binder failed, DefaultBinder runs
    counted = {"bound": "bound", "error": "error", "default-binder": "fell through"}[bind_fallthrough(config, verdict)]
    step = Step("bind", call.backend, call.id, call.started_at, _ms(call.started_at, call.finished_at),
                call.outcome, counted, error=call.error, ignorable=ignorable)
    return step, f"extender binder {call.backend}" if counted == "bound" else ""


def _why_pending(story: Story, calls, chain: FilterChain | None, backends, now, end, pod, watching) -> Story:
    failed_scheduling = [e for e in story.scheduler_says if e.kind == "FailedScheduling"]
    result = chain.result() if chain is not None else None
    bind_errors = [s for s in story.steps if s.verb == "bind" and s.counted == "error"]
    not_called = {s.backend for s in story.steps if s.verb == "filter" and s.not_called}
    if result is not None and result.error and result.error_backend in not_called:
        # No exchange with the backend failed: extproxy could not build its request. The
        # operator's fix is extproxy's (its node cache), not the backend's.
        story.state = "pending"
        story.sentence = (f"Pending: extproxy did not call backend {result.error_backend}: {result.error}. "
                          f"The scheduler failed the attempt on that error.")
        story.group = fold_numbers(f"backend {result.error_backend} not called: {result.error}")
    elif result is not None and result.error:
        story.state = "pending"
        story.sentence = (f"Pending: the scheduler failed the attempt on backend {result.error_backend}'s "
                          f"filter error: {result.error}")
        story.group = fold_numbers(f"filter error from {result.error_backend}")
    elif result is not None and not result.passed:
        text, story.reasons = no_node_sentence(story.total or 0, result.failed, result.unresolvable)
        story.state = "pending"
        story.sentence = f"Pending: the extenders left no node: {text}"
        story.group = fold_numbers(text)
    elif bind_errors:
        story.state = "pending"
        # A combined bind with no binder that answered is extproxy's own, through the API.
        binder = bind_errors[-1].backend
        where = "through the Kubernetes API (extproxy's bind)" if binder == "combined" else f"on {binder}"
        story.sentence = f"Pending: binding failed {where}: {bind_errors[-1].error}"
        story.group = fold_numbers(f"bind failed {where}")
    elif failed_scheduling:
        story.state = "pending"
        story.sentence = f"Pending: the scheduler says: {failed_scheduling[-1].message}"
        story.group = fold_numbers(failed_scheduling[-1].message)
    elif now - end < IN_PROGRESS_GRACE:
        story.state = "in progress"
        story.sentence = "Scheduling in progress: " + _left(story)
    elif chain is None:
        story.state = "unknown"
        story.sentence = "No filter call in this attempt: nothing to say about its nodes."
        if any(s.verb == "preempt" for s in story.steps):
            story.sentence = "No filter call in this attempt: the extenders were asked which pods to evict."
    elif _expects_extender_bind(backends, pod) or watching:
        story.state = "pending"
        story.sentence = f"Pending: {_left(story)}, but no bind followed (the scheduler stopped later in its cycle)."
        story.group = "no bind after the extenders"
    else:
        story.state = "unconfirmed"
        story.sentence = (f"{_left(story)}; the scheduler binds it itself, which extproxy sees only "
                          "through the Kubernetes API.")
    return story


def _left(story: Story) -> str:
    if story.total is None:  # no filter call in the attempt (a preempt alone: the scheduler's PostFilter)
        asked = any(s.verb == "preempt" for s in story.steps)
        return "the extenders were asked which pods to evict" if asked else "no filter call seen yet"
    return f"the extenders left {story.feasible}/{story.total} node(s)"


def _expects_extender_bind(backends: Mapping[str, BackendConfig], pod: dict | None) -> bool:
    binder = choose_binder(list(backends.values()), pod or {})
    return binder is not None and not binder.ignorable
