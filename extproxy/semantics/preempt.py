"""The preempt chain: callExtenders in the scheduler's preemption (§4.6).

May import: the standard library, ``extproxy.protocol`` and the other ``semantics`` modules.
No Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from extproxy.protocol import MetaVictims

from .chain import Chain
from .decision import Outcome
from .judge import Verdict, judge_preempt

if TYPE_CHECKING:  # annotations only: semantics needs no config loading at run time
    from extproxy.config import BackendConfig


@dataclass
class CombinedPreempt:
    """victims: the final map (empty = no preemption); error: the preemption ends in error."""

    victims: dict[str, MetaVictims]
    error: str = ""
    error_backend: str = ""


class PreemptChain(Chain):
    """Sequential preempt over backends, as callExtenders does (§4.6).

    Feed the backends from ``interested(backends, pod, "preempt")``. Each reply REPLACES the
    map; an empty map ends the chain (no preemption); an ignorable backend's failure is skipped
    with the map unchanged; any other failure ends the preemption in error. An empty initial map
    means no call at all. Replies are judged against the map the proxy was given by the
    scheduler (not the shrinking map of the chain): the nearest the proxy gets to the scheduler's
    own check against the pods on the node.
    """

    def __init__(self, victims: dict[str, MetaVictims], backends: Sequence[BackendConfig] = ()) -> None:
        super().__init__(backends)
        self.given = {n: list(mv.pods) for n, mv in victims.items()}
        self._map = dict(victims)

    @property
    def remaining(self) -> dict[str, MetaVictims]:
        return dict(self._map)

    def _exhausted(self) -> bool:
        return not self._map

    def judge(self, backend: BackendConfig, status: int, body: bytes) -> Verdict:
        return judge_preempt(backend, self.given, status, body)

    def apply(self, backend: BackendConfig, verdict: Verdict | None, transport_error: str = "") -> None:
        self._take(backend)
        if verdict is None or verdict.outcome != Outcome.OK:
            self._fail(backend, verdict.error if verdict is not None else transport_error or "no answer")
            return
        self._map = dict(verdict.victims or {})

    def result(self) -> CombinedPreempt:
        return CombinedPreempt({} if self.error else dict(self._map), self.error, self.error_backend)
