"""The :class:`Policy` object: runs the rules for filter, prioritize, preempt.

* filter: rules run in order; the first failing rule gives the node's
  reason. If that failure is resolvable, the remaining rules are still
  checked for an *unresolvable* failure: when one is found the node is
  reported unresolvable with that rule's reason (preemption could not help,
  and reporting it as resolvable would make the scheduler evict pods for
  nothing). The unresolvable node names are remembered per pod UID (at most
  10000 pods, oldest first) for a later preempt call.
* prioritize: score rules combined by weight, rounded half up, clamped to
  integers 0..10; 0 for every node when the policy has no score rule.
* preempt: keeps each node with its victims list unchanged, unless the node
  is unresolvable for this pod (re-evaluated when ``nodes`` is given,
  otherwise taken from the pod's last filter call); nodes with no victims
  are dropped. Nodes never seen are kept.
* record_binding / forget_pod: the ledger (see :mod:`.resources`).

No method raises on odd pod or node data: a node whose evaluation fails
unexpectedly is failed unresolvably with "policy evaluation error: ..."
(filter) or scored 0 (prioritize).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from .resources import Ledger
from .rules import EvalContext, Failure, FilterRule, NodeCheck, ScoreRule, node_labels, node_name

_VERDICT_CACHE_PODS = 10_000
_NODE_LABEL_CACHE = 100_000


@dataclass
class FilterOutcome:
    """Result of :meth:`Policy.filter`: node names that pass, and reasons (name -> text)."""

    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)


def _constant(failure: Failure) -> NodeCheck:
    """A node check that fails every node with ``failure``."""
    return lambda node: failure


def _pod_uid(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")


class Policy:
    """A named, parsed policy. Build it with ``parse_policy`` or ``default_policy``."""

    def __init__(
        self,
        name: str,
        filter_rules: Sequence[FilterRule] = (),
        score_rules: Sequence[ScoreRule] = (),
        binds: bool = False,
        ledger: Ledger | None = None,
    ) -> None:
        self.name = name
        self.filter_rules: tuple[FilterRule, ...] = tuple(filter_rules)
        self.score_rules: tuple[ScoreRule, ...] = tuple(score_rules)
        self.binds = binds
        self.ledger = ledger if ledger is not None else Ledger()
        self._lock = threading.Lock()
        self._verdicts: OrderedDict[str, frozenset[str]] = OrderedDict()
        self._topology_keys = {getattr(r, "topology_key") for r in self.score_rules if hasattr(r, "topology_key")}
        self._node_labels: OrderedDict[str, dict[str, str]] = OrderedDict()

    def __repr__(self) -> str:
        kinds = [r.kind for r in self.filter_rules + self.score_rules]
        return f"Policy({self.name!r}, rules={kinds}, binds={self.binds})"

    # ------------------------------------------------------------------ helpers

    def _context(self) -> EvalContext:
        with self._lock:
            labels = dict(self._node_labels)
        return EvalContext(ledger=self.ledger, node_labels=labels)

    def _remember_nodes(self, nodes: Sequence[Mapping[str, Any]]) -> None:
        if not self._topology_keys:
            return
        keys = self._topology_keys
        with self._lock:
            for node in nodes:
                labels = node_labels(node)
                name = node_name(node)
                self._node_labels[name] = {k: labels[k] for k in keys if k in labels}
                self._node_labels.move_to_end(name)
            while len(self._node_labels) > _NODE_LABEL_CACHE:
                self._node_labels.popitem(last=False)

    def _evaluate(
        self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]
    ) -> dict[str, Failure]:
        ctx = self._context()
        checks: list[NodeCheck] = []
        for rule in self.filter_rules:
            try:
                checks.append(rule.prepare(pod, ctx))
            except Exception as exc:  # odd pod data
                broken = Failure(f"policy evaluation error: {rule.kind}: {type(exc).__name__}", True)
                checks.append(_constant(broken))
        failures: dict[str, Failure] = {}
        for node in nodes:
            try:
                name = node_name(node)
                first: Failure | None = None
                for check in checks:
                    failure = check(node)
                    if failure is None:
                        continue
                    if failure.unresolvable:
                        first = failure
                        break
                    if first is None:
                        first = failure
                if first is not None:
                    failures[name] = first
            except Exception as exc:
                failures[node_name(node) if isinstance(node, dict) else repr(node)] = Failure(
                    f"policy evaluation error: {type(exc).__name__}", True
                )
        return failures

    # ------------------------------------------------------------------ public API

    def filter(self, pod: dict, nodes: list[dict]) -> FilterOutcome:
        """Split ``nodes`` (full Node dicts) into passed / failed / unresolvable."""
        self._remember_nodes(nodes)
        failures = self._evaluate(pod, nodes)
        out = FilterOutcome()
        for node in nodes:
            name = node_name(node) if isinstance(node, dict) else repr(node)
            failure = failures.get(name)
            if failure is None:
                out.passed.append(name)
            elif failure.unresolvable:
                out.unresolvable[name] = failure.reason
            else:
                out.failed[name] = failure.reason
        uid = _pod_uid(pod)
        with self._lock:
            self._verdicts[uid] = frozenset(out.unresolvable)
            self._verdicts.move_to_end(uid)
            while len(self._verdicts) > _VERDICT_CACHE_PODS:
                self._verdicts.popitem(last=False)
        return out

    def prioritize(self, pod: dict, nodes: list[dict]) -> dict[str, int]:
        """Node name -> integer score 0..10 (0 everywhere without score rules)."""
        names = [node_name(n) if isinstance(n, dict) else repr(n) for n in nodes]
        if not self.score_rules:
            return {name: 0 for name in names}
        self._remember_nodes(nodes)
        ctx = self._context()
        prepared = []
        for rule in self.score_rules:
            try:
                prepared.append((rule.weight, rule.prepare(pod, nodes, ctx)))
            except Exception:
                prepared.append((rule.weight, lambda node: 0.0))
        total_weight = sum(w for w, _ in prepared)
        scores: dict[str, int] = {}
        for name, node in zip(names, nodes):
            acc = 0.0
            for weight, fn in prepared:
                try:
                    value = float(fn(node))
                except Exception:
                    value = 0.0
                if not math.isfinite(value):
                    value = 0.0
                acc += weight * min(10.0, max(0.0, value))
            combined = acc / total_weight if total_weight > 0 else 0.0
            scores[name] = int(min(10, max(0, math.floor(combined + 0.5))))
        return scores

    def preempt(
        self,
        pod: dict,
        node_to_victims: dict[str, list[dict]],
        nodes: list[dict] | None = None,
    ) -> dict[str, list[dict]]:
        """Keep the nodes whose failure preemption can fix, victims unchanged.

        ``nodes`` (optional extension): Node dicts to re-evaluate; without it
        the unresolvable set of the pod's last filter call is used.
        """
        if nodes is not None:
            wanted = [n for n in nodes if node_name(n) in node_to_victims]
            failures = self._evaluate(pod, wanted)
            blocked = {name for name, f in failures.items() if f.unresolvable}
        else:
            with self._lock:
                blocked = set(self._verdicts.get(_pod_uid(pod), frozenset()))
        return {
            name: victims
            for name, victims in node_to_victims.items()
            if victims and name not in blocked
        }

    def record_binding(self, pod: dict, node_name: str) -> None:
        """Remember that ``pod`` is bound to ``node_name`` (ledger)."""
        self.ledger.record(pod, node_name)

    def forget_pod(self, pod_uid: str) -> None:
        """Forget a pod from the ledger and the filter-verdict memory."""
        self.ledger.forget(pod_uid)
        with self._lock:
            self._verdicts.pop(pod_uid, None)
