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
    against ``feasible``.
    """
    totals = {name: 0 for name in feasible}
    for backend, verdict in results:
        if verdict is None or verdict.outcome != Outcome.OK:
            continue
        for host, score in (verdict.scores or {}).items():
            if host in totals:
                totals[host] += score * backend.weight
    return totals


def prioritize_answer(feasible: list[str], totals: dict[str, int]) -> list[HostPriority]:
    """The combined HostPriorityList: one entry per host (a repeat would count twice)."""
    seen: set[str] = set()
    out: list[HostPriority] = []
    for name in feasible:
        if name not in seen:
            seen.add(name)
            out.append(HostPriority(name, totals.get(name, 0)))
    return out

