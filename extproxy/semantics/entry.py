"""The combined form's single extender entry, for ``scheduler_config --combined``.

Derives the one entry that represents every backend, or refuses with the reason, and lists the
representable differences worth printing beside it.

May import: the standard library and ``extproxy.protocol``. No Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from extproxy.protocol import Verb

if TYPE_CHECKING:  # annotations only: semantics needs no config loading at run time
    from extproxy.config import BackendConfig, ManagedResource

#: Added to the sequential time budget of the combined entry's httpTimeout: the proxy's own time
#: between its backends' answers. Fixed, not per backend: at 5,000 full Node objects that is about
#: 57 ms plus 20 ms per full-object backend of CPU (bench/README.md, twenty-third pass).
COMBINED_TIMEOUT_MARGIN = 1.0


@dataclass
class CombinedRefusal:
    """A backend set that one combined extender entry cannot represent, and why."""

    reason: str
    backends: list[str] = field(default_factory=list)


def _go_duration(seconds: float) -> str:
    ms = -int(-round(seconds * 1000, 6) // 1)  # ceiling, in whole milliseconds
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def combined_timeout(backends: Sequence[BackendConfig], parallel_filter: bool = False) -> float:
    """Seconds the combined entry's httpTimeout must cover: the longest verb, plus a margin.

    filter and preempt run backends one after another (sum; filter: max with parallelFilter),
    prioritize runs them in parallel (max), bind calls the one binder.
    """
    def t(verb: Verb) -> list[float]:
        return [b.http_timeout for b in backends if b.verb_string(verb)]

    filters, preempts = t(Verb.FILTER), t(Verb.PREEMPT)
    filt = max(filters, default=0.0) if parallel_filter else sum(filters)
    need = max(filt, sum(preempts), max(t(Verb.PRIORITIZE), default=0.0), max(t(Verb.BIND), default=0.0))
    return need + COMBINED_TIMEOUT_MARGIN


def combined_entry(
    backends: Sequence[BackendConfig], *, url_prefix: str = "", parallel_filter: bool = False
) -> dict[str, Any] | CombinedRefusal:
    """The single extender entry for ``scheduler_config --combined``, or why there is none.

    | Field            | Derived as                                                        |
    | ---------------- | ----------------------------------------------------------------- |
    | filterVerb etc.  | "filter"/"prioritize"/"preempt"/"bind" when any backend has it    |
    | weight           | 1: the proxy answers Σ Score×weight, the scheduler adds ×1×10     |
    | managedResources | union (with each ignoredByScheduler) when EVERY backend has some; |
    |                  | none otherwise (some backend sees every pod, so the proxy must)   |
    | nodeCacheCapable | true only if every backend that filters, prioritizes or preempts  |
    |                  | is (a bind sends no nodes): with false the proxy gets the full    |
    |                  | Nodes (and victim Pods) and can send names to mode-true backends; |
    |                  | with true it could not give mode-false backends objects           |
    | ignorable        | true only if every backend is: the proxy applies the ignorable    |
    |                  | rule per backend, so a mix is representable with false            |
    | httpTimeout      | combined_timeout(): sum of the filter (and preempt) chain's       |
    |                  | timeouts, max for prioritize, plus COMBINED_TIMEOUT_MARGIN         |

    | Backend set                                          | Result                         |
    | ---------------------------------------------------- | ------------------------------ |
    | no backends                                          | refused                        |
    | ignorable binder beside non-ignorable backends       | refused: the entry must be     |
    |                                                      | non-ignorable, so a failed     |
    |                                                      | bind would fail instead of     |
    |                                                      | falling through to the Bind    |
    |                                                      | plugins                        |
    | a backend without managedResources beside a resource | refused: the entry must see    |
    | with ignoredByScheduler: true                        | every pod, and then cannot     |
    |                                                      | carry ignoredByScheduler       |
    | ignorable and non-ignorable filter/preempt backends  | represented (ignorable false)  |
    | mixed nodeCacheCapable                               | represented (false)            |
    | a binder interested in fewer pods than the entry     | represented, see               |
    |                                                      | combined_caveats               |
    """
    if not backends:
        return CombinedRefusal("no backends are configured: there is nothing to combine")
    all_ignorable = all(b.ignorable for b in backends)
    binders = [b for b in backends if b.bind_verb]
    if any(b.ignorable for b in binders) and not all_ignorable:
        return CombinedRefusal(
            f"backend {binders[0].name!r} is an ignorable binder beside non-ignorable backends: "
            "the combined entry must be non-ignorable for them, so a failed bind would fail the "
            "binding where the scheduler would fall through to its Bind plugins; use the "
            "per-backend form",
            [b.name for b in binders],
        )
    everyone = [b.name for b in backends if not b.managed_resources]
    ignored = [r.name for b in backends for r in b.managed_resources if r.ignored_by_scheduler]
    if everyone and ignored:
        return CombinedRefusal(
            f"backend(s) {', '.join(everyone)} have no managedResources (interested in every "
            "pod), so the combined entry cannot list managedResources, and then the "
            f"ignoredByScheduler of {', '.join(ignored)} would be lost (the NodeResourcesFit "
            "filter would check them again); use the per-backend form",
            everyone,
        )
    entry: dict[str, Any] = {}
    if url_prefix:
        entry["urlPrefix"] = url_prefix
    # The combined endpoints are /extender/<verb>: each verb string is the verb itself.
    for verb in (Verb.FILTER, Verb.PREEMPT, Verb.PRIORITIZE):  # KubeSchedulerConfiguration's field order
        if any(b.verb_string(verb) for b in backends):
            entry[f"{verb}Verb"] = verb.value
    entry["weight"] = 1
    if binders:
        entry["bindVerb"] = Verb.BIND.value
    entry["httpTimeout"] = _go_duration(combined_timeout(backends, parallel_filter))
    entry["nodeCacheCapable"] = all(b.node_cache_capable for b in _sent_nodes(backends))
    if not everyone:
        union: list[ManagedResource] = [r for b in backends for r in b.managed_resources]
        entry["managedResources"] = [
            {"name": r.name, "ignoredByScheduler": r.ignored_by_scheduler} for r in union
        ]
    entry["ignorable"] = all_ignorable
    return entry


def _sent_nodes(backends: Sequence[BackendConfig]) -> list[BackendConfig]:
    """The backends whose calls carry nodes, whose nodeCacheCapable the entry's must serve: a
    bind-only backend's (false by default) says nothing, and counting it made the entry send
    and answer full Node objects for nothing."""
    return [b for b in backends if b.filter_verb or b.prioritize_verb or b.preempt_verb]


def combined_caveats(backends: Sequence[BackendConfig]) -> list[str]:
    """Representable differences of the combined entry worth printing beside it."""
    notes: list[str] = []
    every_pod = any(not b.managed_resources for b in backends)
    all_ignorable = bool(backends) and all(b.ignorable for b in backends)
    for b in backends:
        if b.bind_verb and b.managed_resources and not all_ignorable:
            narrower = every_pod or any(o is not b and o.managed_resources for o in backends)
            if narrower:
                notes.append(
                    f"binder {b.name!r} is interested in fewer pods than the combined entry: "
                    "for the other pods the scheduler calls the proxy's bind, and the proxy "
                    "binds through the API itself (what DefaultBinder does) instead of the "
                    "scheduler running its Bind plugins"
                )
    sent_nodes = _sent_nodes(backends)
    if any(not b.node_cache_capable for b in sent_nodes) and any(b.node_cache_capable for b in sent_nodes):
        notes.append(
            "mixed nodeCacheCapable: the combined entry uses false, so the scheduler sends full "
            "Node objects (and victim Pods) to the proxy for every call, and takes the filter's "
            "answer as Node objects where a names-only filter backend's names would have kept its "
            "own (newer schedulers then score the returned objects as nodes without pods)"
        )
    if any(b.ignorable for b in backends) and not all_ignorable:
        notes.append(
            "a failure or timeout of the proxy itself fails the attempt (the entry is not "
            "ignorable), even where only ignorable backends were slow"
        )
    return notes
