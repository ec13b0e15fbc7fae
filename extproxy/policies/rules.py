"""The rule kinds: filter rules (pass/fail a node) and score rules (0..10).

Over 400 lines because it holds every rule kind, each a short class, side by side with the
table below: one place to read what a policy can say.

Every rule is immutable after parsing. Per call, a rule is *prepared* for
one pod (``prepare``), which does the pod-dependent work once (tolerations,
requests, ledger snapshot, CEL conversion of the pod) and returns a cheap
per-node function.

Filter rules return ``None`` (pass) or a :class:`Failure` with a reason that
is the same text on every node failing for the same cause (the scheduler
groups identical reasons) and contains no '%'. ``Failure.unresolvable`` says
whether preemption could fix it.

===============  =========================================  ==============
kind             fails a node when                          unresolvable
===============  =========================================  ==============
requiredLabels   a fixed / fromPodLabel label is missing    option, def. true
                 or differs, or a selector requirement fails
avoidTaints      a taint with a listed effect is not        option, def. true
                 tolerated by the pod
resourceFit      allocatable < request (unresolvable), or   computed
                 allocatable - ledger < request (resolvable)
celFilter        expression is false (reason from config)   option, def. true
                 / evaluation error (always unresolvable)
===============  =========================================  ==============

Score rules return a float in 0..10 per node; the policy combines them by
weight: ``preferredLabels``, ``spread``, ``leastAllocated`` and ``celScore``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

from .cel import CelProgram, CelRuntimeError
from .resources import (
    Ledger,
    extended_requests,
    node_allocatable,
    pod_requests,
)
from .selector import Requirement

NodeCheck = Callable[[Mapping[str, Any]], "Failure | None"]
NodeScore = Callable[[Mapping[str, Any]], float]

_ZERO = Fraction(0)


@dataclass(frozen=True)
class Failure:
    """Why a node fails a filter rule, and whether preemption cannot fix it."""

    reason: str
    unresolvable: bool


def node_name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


def node_labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def pod_labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


@dataclass
class EvalContext:
    """What rules may consult besides the pod and node: the ledger."""

    ledger: Ledger
    node_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


class FilterRule(ABC):
    kind: str = ""

    @abstractmethod
    def prepare(self, pod: Mapping[str, Any], ctx: EvalContext) -> NodeCheck: ...


class ScoreRule(ABC):
    kind: str = ""
    weight: float = 1.0

    @abstractmethod
    def prepare(
        self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], ctx: EvalContext
    ) -> NodeScore: ...


# --------------------------------------------------------------------------- filters


@dataclass(frozen=True)
class RequiredLabels(FilterRule):
    """Node must carry labels: fixed values, values copied from pod labels, a selector.

    ``from_pod_label`` maps node label key -> pod label key; when the pod does
    not have that label the requirement is skipped.
    """

    labels: Mapping[str, str] = field(default_factory=dict)
    from_pod_label: Mapping[str, str] = field(default_factory=dict)
    selector: tuple[Requirement, ...] = ()
    unresolvable: bool = True
    kind: str = "requiredLabels"

    def prepare(self, pod: Mapping[str, Any], ctx: EvalContext) -> NodeCheck:
        wanted: list[tuple[str, str, Failure]] = []
        for key, value in self.labels.items():
            wanted.append((key, value, Failure(f"node(s) lack label {key}={value}", self.unresolvable)))
        plabels = pod_labels(pod)
        for node_key, pod_key in self.from_pod_label.items():
            if pod_key in plabels:
                value = str(plabels[pod_key])
                wanted.append(
                    (node_key, value, Failure(f"node(s) lack label {node_key}={value}", self.unresolvable))
                )
        sel = [
            (req, Failure(f"node(s) did not match label requirement {req}", self.unresolvable))
            for req in self.selector
        ]

        def check(node: Mapping[str, Any]) -> Failure | None:
            labels = node_labels(node)
            for key, value, failure in wanted:
                if labels.get(key) != value:
                    return failure
            for req, failure in sel:
                if not req.matches(labels):
                    return failure
            return None

        return check


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' Toleration.ToleratesTaint."""
    effect = toleration.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = toleration.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


@dataclass(frozen=True)
class AvoidTaints(FilterRule):
    """Fail nodes having a taint with one of ``effects`` that the pod does not tolerate."""

    effects: frozenset[str] = frozenset({"NoSchedule", "NoExecute"})
    unresolvable: bool = True
    kind: str = "avoidTaints"

    def prepare(self, pod: Mapping[str, Any], ctx: EvalContext) -> NodeCheck:
        tolerations = [t for t in ((pod.get("spec") or {}).get("tolerations") or []) if isinstance(t, dict)]
        effects = self.effects
        unresolvable = self.unresolvable
        cache: dict[tuple[str, str, str], Failure | None] = {}

        def check(node: Mapping[str, Any]) -> Failure | None:
            for taint in (node.get("spec") or {}).get("taints") or ():
                eff = taint.get("effect") or ""
                if eff not in effects:
                    continue
                ident = (taint.get("key") or "", taint.get("value") or "", eff)
                if ident not in cache:
                    if any(tolerates(t, taint) for t in tolerations):
                        cache[ident] = None
                    else:
                        cache[ident] = Failure(
                            f"node(s) had untolerated taint {{{ident[0]}: {ident[1]}}}", unresolvable
                        )
                failure = cache[ident]
                if failure is not None:
                    return failure
            return None

        return check


@dataclass(frozen=True)
class ResourceFit(FilterRule):
    """Node allocatable minus ledger usage must cover the pod's requests.

    ``resources`` empty: every extended resource the pod requests. A node
    whose allocatable alone is too small fails unresolvably; one that is only
    short because of recorded (ledger) pods fails resolvably.
    """

    resources: tuple[str, ...] = ()
    kind: str = "resourceFit"

    def wanted(self, pod: Mapping[str, Any]) -> dict[str, Fraction]:
        if self.resources:
            return pod_requests(pod, self.resources)
        return extended_requests(pod)

    def prepare(self, pod: Mapping[str, Any], ctx: EvalContext) -> NodeCheck:
        need = self.wanted(pod)
        if not need:
            return lambda node: None
        used = ctx.ledger.used(need)
        hard = {r: Failure(f"Insufficient {r}", True) for r in need}
        soft = {r: Failure(f"Insufficient {r}", False) for r in need}
        items = sorted(need.items())

        def check(node: Mapping[str, Any]) -> Failure | None:
            alloc = {r: node_allocatable(node, r) for r, _ in items}
            for r, q in items:
                if alloc[r] < q:
                    return hard[r]
            node_used = used.get(node_name(node))
            if node_used:
                for r, q in items:
                    if alloc[r] - node_used.get(r, _ZERO) < q:
                        return soft[r]
            return None

        return check


@dataclass(frozen=True)
class CelFilter(FilterRule):
    """CEL boolean over ``pod`` and ``node``; false fails the node with ``reason``."""

    program: CelProgram
    reason: str
    unresolvable: bool = True
    kind: str = "celFilter"

    def prepare(self, pod: Mapping[str, Any], ctx: EvalContext) -> NodeCheck:
        program = self.program
        try:
            pod_cel = program.convert(pod)
        except Exception as exc:  # a pod that json_to_cel cannot convert
            broken = Failure(f"policy expression error: cannot convert pod ({type(exc).__name__})", True)
            return lambda node: broken
        false_failure = Failure(self.reason, self.unresolvable)

        def check(node: Mapping[str, Any]) -> Failure | None:
            try:
                result = program.evaluate(pod_cel, program.convert(node))
            except CelRuntimeError as exc:
                return Failure(f"policy expression error: {exc}", True)
            except Exception as exc:
                return Failure(f"policy expression error: {type(exc).__name__}", True)
            if result is True:
                return None
            if result is False:
                return false_failure
            return Failure(
                f"policy expression error: expression returned {type(result).__name__}, not bool", True
            )

        return check


# --------------------------------------------------------------------------- scores


def clamp_score(value: float) -> float:
    if value != value or value is None:  # NaN
        return 0.0
    return min(10.0, max(0.0, float(value)))


@dataclass(frozen=True)
class PreferredLabel:
    key: str
    value: str | None
    weight: float


@dataclass(frozen=True)
class PreferredLabels(ScoreRule):
    """Score = 10 * (sum of weights of matching labels) / (sum of all weights)."""

    labels: tuple[PreferredLabel, ...]
    weight: float = 1.0
    kind: str = "preferredLabels"

    def prepare(self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], ctx: EvalContext) -> NodeScore:
        total = sum(p.weight for p in self.labels)
        prefs = self.labels

        def score(node: Mapping[str, Any]) -> float:
            labels = node_labels(node)
            got = 0.0
            for p in prefs:
                v = labels.get(p.key)
                if v is not None and (p.value is None or v == p.value):
                    got += p.weight
            return 10.0 * got / total if total else 0.0

        return score


@dataclass(frozen=True)
class Spread(ScoreRule):
    """Prefer topology domains with fewer matching pods recorded in the ledger.

    Counts ledger pods in the pod's namespace whose labels include
    ``match_labels`` (default: the pod's own labels; an empty selector counts
    every pod of the namespace). A pod counts for the domain of its node; a
    node's domain is read from the nodes of this call or, for other nodes,
    from labels remembered from earlier calls. Scores are min-max scaled: the
    emptiest candidate domain gets 10, the fullest 0 (all 10 when equal);
    nodes without the topology label get 0.
    """

    topology_key: str
    match_labels: Mapping[str, str] | None = None
    weight: float = 1.0
    kind: str = "spread"

    def prepare(self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], ctx: EvalContext) -> NodeScore:
        key = self.topology_key
        selector = dict(self.match_labels) if self.match_labels is not None else dict(pod_labels(pod))
        namespace = (pod.get("metadata") or {}).get("namespace") or ""
        domain_of: dict[str, str] = {}
        for name, labels in ctx.node_labels.items():
            if key in labels:
                domain_of[name] = labels[key]
        for node in nodes:
            labels = node_labels(node)
            if key in labels:
                domain_of[node_name(node)] = labels[key]
        counts: dict[str, int] = {}
        for name, pods in ctx.ledger.pods_by_node().items():
            domain = domain_of.get(name)
            if domain is None:
                continue
            n = sum(
                1
                for p in pods
                if p.namespace == namespace and all(p.labels.get(k) == v for k, v in selector.items())
            )
            if n:
                counts[domain] = counts.get(domain, 0) + n
        candidate = {node_labels(n)[key] for n in nodes if key in node_labels(n)}
        values = [counts.get(d, 0) for d in candidate] or [0]
        hi, lo = max(values), min(values)

        def score(node: Mapping[str, Any]) -> float:
            domain = node_labels(node).get(key)
            if domain is None:
                return 0.0
            if hi == lo:
                return 10.0
            return 10.0 * (hi - counts.get(domain, 0)) / (hi - lo)

        return score


@dataclass(frozen=True)
class LeastAllocated(ScoreRule):
    """Prefer nodes with more of the resources left free (ledger-based).

    Score = 10 * mean over ``resources`` (default: extended resources the pod
    requests) of (allocatable - ledger - request) / allocatable, clamped;
    resources a node does not have are skipped, a node having none gets 0.
    When there are no such resources, nodes with fewer recorded pods score
    higher (10 * (max - count) / max; all 10 when nothing is recorded).
    """

    resources: tuple[str, ...] = ()
    weight: float = 1.0
    kind: str = "leastAllocated"

    def prepare(self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], ctx: EvalContext) -> NodeScore:
        if self.resources:
            reqs = pod_requests(pod, self.resources)
            need = {r: reqs.get(r, _ZERO) for r in self.resources}
        else:
            need = extended_requests(pod)
        if not need:
            counts = ctx.ledger.pod_counts()
            hi = max((counts.get(node_name(n), 0) for n in nodes), default=0)

            def by_count(node: Mapping[str, Any]) -> float:
                if hi == 0:
                    return 10.0
                return 10.0 * (hi - counts.get(node_name(node), 0)) / hi

            return by_count
        used = ctx.ledger.used(need)

        def score(node: Mapping[str, Any]) -> float:
            node_used = used.get(node_name(node)) or {}
            parts: list[float] = []
            for r, q in need.items():
                alloc = node_allocatable(node, r)
                if alloc <= 0:
                    continue
                free = (alloc - node_used.get(r, _ZERO) - q) / alloc
                parts.append(min(1.0, max(0.0, float(free))))
            return 10.0 * sum(parts) / len(parts) if parts else 0.0

        return score


@dataclass(frozen=True)
class CelScore(ScoreRule):
    """CEL number per node, clamped to 0..10; an error or non-number gives 0."""

    program: CelProgram
    weight: float = 1.0
    kind: str = "celScore"

    def prepare(self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], ctx: EvalContext) -> NodeScore:
        program = self.program
        try:
            pod_cel = program.convert(pod)
        except Exception:
            return lambda node: 0.0

        def score(node: Mapping[str, Any]) -> float:
            try:
                result = program.evaluate(pod_cel, program.convert(node))
            except Exception:
                return 0.0
            if isinstance(result, bool) or not isinstance(result, (int, float)):
                return 0.0
            if isinstance(result, float) and not math.isfinite(result):
                return 0.0 if result != math.inf else 10.0
            return clamp_score(result)

        return score
