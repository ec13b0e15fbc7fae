"""Scores and weights: how the scheduler adds up the prioritizers' answers (§4.4).

May import: the standard library, ``extproxy.protocol`` and ``semantics.judge``. No Django, no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from extproxy.protocol import HostPriority

from .decision import Outcome
from .judge import Verdict

if TYPE_CHECKING:  # annotations only: semantics needs no config loading at run time
    from extproxy.config import BackendConfig


def combine_prioritize(
    feasible: list[str], results: Sequence[tuple[BackendConfig, Verdict | None]]
) -> dict[str, int]:
    """Σ Score × weight per feasible host over the backends that answered (§4.4).

    The combined entry is registered with weight 1, so the scheduler's own ×weight×10 turns
    these totals into exactly Σ Score × weight × 10. A backend that failed (any error, ignorable
    or not) gives no scores. Hosts outside ``feasible`` are ignored, a host a backend listed
    twice counts twice (the judge sums them), nothing is clamped, and every feasible host is
    present (0 without scores). ``results``: the interested prioritizers, verdicts judged
    against ``feasible``. Each total wraps as Go's int64 does: the scheduler's sum wraps, and
    a total past int64 would fail the scheduler's decoding of the whole answer.
    """
    totals = {name: 0 for name in feasible}
    for backend, verdict in results:
        if verdict is None or verdict.outcome != Outcome.OK:
            continue
        for host, score in (verdict.scores or {}).items():
            if host in totals:
                totals[host] += score * backend.weight
    return {host: _as_int64(total) for host, total in totals.items()}


def _as_int64(value: int) -> int:
    """`value` wrapped to int64 as Go's arithmetic wraps it (congruent mod 2^64, so the
    scheduler's ×10 of it is the ×10 it would have computed)."""
    return (value + 2**63) % 2**64 - 2**63


def listed_hosts(results: Sequence[tuple[BackendConfig, Verdict | None]], every_host: bool) -> set[str] | None:
    """The hosts the scheduler would hold a score from some extender for; None for all of them.

    It matters beyond the sum: the scheduler gives a host some extender listed a random
    tie-breaker (prioritizeNodes: `Randomizer = rand.Int()`), and one no extender listed keeps
    0, losing every tie. So the answer lists only the hosts a backend that answered listed; or
    every host when an interested backend has no prioritizeVerb (`every_host`: the scheduler's
    client then lists every node with Score 0 itself, without calling it). A host is listed
    whatever its score (0 too) and however often; a listed host not offered, an empty list and
    a failed call list nothing (``Verdict.listed``, filled where the judge reads the reply).
    """
    if every_host:
        return None
    listed: set[str] = set()
    for _, verdict in results:
        if verdict is not None and verdict.outcome == Outcome.OK:
            listed.update(verdict.listed or ())
    return listed


def prioritize_answer(feasible: list[str], totals: dict[str, int],
                      listed: set[str] | None = None) -> list[HostPriority]:
    """The combined HostPriorityList: one entry per host listed (a repeat would count twice),
    in the order of ``feasible``."""
    seen: set[str] = set()
    out: list[HostPriority] = []
    for name in feasible:
        if name not in seen and (listed is None or name in listed):
            seen.add(name)
            out.append(HostPriority(name, totals.get(name, 0)))
    return out
