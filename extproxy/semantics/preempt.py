"""The preempt chain: callExtenders in the scheduler's preemption (§4.6).

May import: the standard library, ``extproxy.protocol`` and the other ``semantics`` modules.
No Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from extproxy.protocol import MetaVictims, decode_preemption_result

from .errors import _failure
from .judge import Verdict, _decision, _finding, judge_preempt

if TYPE_CHECKING:  # annotations only: semantics needs no config loading at run time
    from extproxy.config import BackendConfig


def judge_preempt_for(
    backend: BackendConfig, input_victims: dict[str, list[str]], status: int, body: bytes
) -> Verdict:
    """judge_preempt plus callExtenders' ignorable rule (§4.6).

    For an ignorable backend, nodes kept with null or empty victims are dropped from its reply
    instead of failing it (other errors still fail it, and the chain then skips it).
    """
    verdict = judge_preempt(
        backend.name, input_victims, status, body, backend.url_prefix,
        verb=backend.preempt_verb or "preempt",
    )
    if not backend.ignorable or verdict.outcome == "ok":
        return verdict
    if not verdict.error.startswith("expected at least one victim pod on node"):
        return verdict  # a UID/node error came first: the whole reply fails
    reply = decode_preemption_result(body).node_to_meta_victims
    kept = {n: mv for n, mv in reply.items() if mv is not None and mv.pods}
    dropped = [n for n in reply if n not in kept]
    findings = verdict.findings + [
        _finding("ignorable-dropped-node", f"ignorable: node {n!r} without victims dropped")
        for n in dropped
    ]
    decisions = [
        _decision(n, backend.name, "passed", "victims: " + ", ".join(kept[n].pods))
        if n in kept
        else _decision(n, backend.name, "failed", "dropped by backend")
        for n in input_victims
    ]
    return Verdict("ok", "", decisions, findings, victims=kept)


@dataclass
class PreemptStep:
    backend: str
    outcome: str  # "ok" | "skipped" | "error"
    input: dict[str, MetaVictims]
    error: str = ""
    output: dict[str, MetaVictims] | None = None


@dataclass
class CombinedPreempt:
    """victims: the final map (empty = no preemption); error: the preemption ends in error."""

    victims: dict[str, MetaVictims]
    error: str = ""
    error_backend: str = ""
    steps: list[PreemptStep] = field(default_factory=list)


class PreemptChain:
    """Sequential preempt over backends, as callExtenders does (§4.6).

    Feed the backends from ``interested(backends, pod, "preempt")``. Each reply REPLACES the
    map; an empty map ends the chain (no preemption); an ignorable backend's failure is skipped
    with the map unchanged; any other failure ends the preemption in error. An empty initial map
    means no call at all.
    """

    def __init__(
        self, victims: dict[str, MetaVictims], backends: Sequence[BackendConfig] = ()
    ) -> None:
        self.given = {n: list(mv.pods) for n, mv in victims.items()}
        self._map = dict(victims)
        self._queue = list(backends)
        self.steps: list[PreemptStep] = []
        self.error = ""
        self.error_backend = ""

    @property
    def remaining(self) -> dict[str, MetaVictims]:
        return dict(self._map)

    @property
    def done(self) -> bool:
        return bool(self.error) or not self._map

    def next_backend(self) -> BackendConfig | None:
        if self.done or not self._queue:
            return None
        return self._queue[0]

    def judge(self, backend: BackendConfig, status: int, body: bytes) -> Verdict:
        """Judged against the map the proxy was given (see the section's notes)."""
        return judge_preempt_for(backend, self.given, status, body)

    def apply(self, backend: BackendConfig, verdict: Verdict | None, transport_error: str = "") -> None:
        if self.done:
            raise ValueError(f"preempt chain is done; {backend.name} must not be called")
        if self._queue and self._queue[0].name == backend.name:
            self._queue.pop(0)
        sent = dict(self._map)
        if verdict is None or verdict.outcome != "ok":
            outcome = "skipped" if backend.ignorable else "error"
            problem = _failure(verdict, transport_error)
            self.steps.append(PreemptStep(backend.name, outcome, sent, error=problem))
            if outcome == "error":
                self.error, self.error_backend = problem, backend.name
            return
        self._map = dict(verdict.victims or {})
        self.steps.append(PreemptStep(backend.name, "ok", sent, output=dict(self._map)))

    def result(self) -> CombinedPreempt:
        victims = {} if self.error else dict(self._map)
        return CombinedPreempt(victims, self.error, self.error_backend, list(self.steps))

