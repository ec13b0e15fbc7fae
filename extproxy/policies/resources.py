"""Kubernetes quantities, pod resource requests, and the bound-pods ledger.

* :func:`parse_quantity` turns a Kubernetes quantity string ("2", "500m",
  "1Gi", "1k", "1e3", "-1.5M") into an exact :class:`fractions.Fraction`, so
  comparisons never suffer from float rounding.
* :func:`is_extended_resource` tells extended resources (domain-prefixed, not
  ``*kubernetes.io/``, not ``requests.*``) from native ones.
* :func:`pod_requests` computes a pod's effective requests the way the
  scheduler does: max(sum of app containers (+ restartable init containers),
  each ordinary init container (+ the restartable ones started before it)),
  plus ``spec.overhead``. For extended resources a container's limit is used
  when its request is absent (Kubernetes defaults requests to limits there).
* :class:`Ledger` remembers the resources and labels of pods the policy has
  seen bound (``record_binding``) until they are forgotten (``forget_pod``).
  It is guarded by a lock, so it may be used from several threads, and it is
  bounded: it keeps at most ``max_pods`` pods (default 100000); when full the
  oldest recorded pod is forgotten first.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Iterable, Mapping

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY_RE = re.compile(
    r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?\d+))?$"
)

_ZERO = Fraction(0)


def parse_quantity(value: Any) -> Fraction:
    """Parse a Kubernetes quantity (string, int or float) into a Fraction.

    Raises ``ValueError`` for text that is not a quantity.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    if not isinstance(value, str):
        raise ValueError(f"not a quantity: {value!r}")
    m = _QUANTITY_RE.match(value.strip())
    if not m:
        raise ValueError(f"not a quantity: {value!r}")
    sign, number, suffix, exponent = m.groups()
    amount = Fraction(number)
    if exponent is not None:
        exp = int(exponent)
        if abs(exp) > 100:
            raise ValueError(f"quantity exponent out of range: {value!r}")
        amount *= Fraction(10) ** exp
    elif suffix in _BINARY:
        amount *= _BINARY[suffix]
    else:
        amount *= _DECIMAL[suffix or ""]
    return -amount if sign == "-" else amount


def quantity_or_zero(value: Any) -> Fraction:
    """Like :func:`parse_quantity` but an absent or malformed value counts as 0."""
    if value is None:
        return _ZERO
    try:
        return parse_quantity(value)
    except ValueError:
        return _ZERO


def format_quantity(value: Fraction) -> str:
    """Short text for a quantity in reasons ("2", "0.5")."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):g}"


def is_extended_resource(name: str) -> bool:
    """True for extended resources such as ``example.com/gpu``.

    Native resources have no domain prefix (cpu, memory, hugepages-2Mi) or
    live in the ``kubernetes.io`` domain; ``requests.*`` names are quota names.
    """
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def _container_requests(container: Mapping[str, Any]) -> dict[str, Fraction]:
    res = container.get("resources") or {}
    requests = res.get("requests") or {}
    limits = res.get("limits") or {}
    out: dict[str, Fraction] = {}
    for name, q in requests.items():
        out[name] = quantity_or_zero(q)
    for name, q in limits.items():
        if name not in out and is_extended_resource(name):
            out[name] = quantity_or_zero(q)
    return out


def _add(into: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, _ZERO) + v


def pod_requests(pod: Mapping[str, Any], only: Iterable[str] | None = None) -> dict[str, Fraction]:
    """Effective requests of ``pod`` (resource name -> amount); zero amounts dropped.

    ``only`` restricts the result to those resource names.
    """
    spec = pod.get("spec") or {}
    total: dict[str, Fraction] = {}
    for c in spec.get("containers") or []:
        _add(total, _container_requests(c))
    restartable: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for c in spec.get("initContainers") or []:
        req = _container_requests(c)
        if c.get("restartPolicy") == "Always":  # sidecar: runs alongside the app
            _add(restartable, req)
            _add(total, req)
            candidate = dict(restartable)
        else:
            candidate = dict(restartable)
            _add(candidate, req)
        for k, v in candidate.items():
            if v > init_peak.get(k, _ZERO):
                init_peak[k] = v
    for k, v in init_peak.items():
        if v > total.get(k, _ZERO):
            total[k] = v
    _add(total, {k: quantity_or_zero(v) for k, v in (spec.get("overhead") or {}).items()})
    wanted = set(only) if only is not None else None
    return {k: v for k, v in total.items() if v != 0 and (wanted is None or k in wanted)}


def extended_requests(pod: Mapping[str, Any]) -> dict[str, Fraction]:
    """The pod's requests of extended resources only."""
    return {k: v for k, v in pod_requests(pod).items() if is_extended_resource(k)}


def node_allocatable(node: Mapping[str, Any], name: str) -> Fraction:
    """``status.allocatable[name]`` of a node (0 when absent)."""
    alloc = ((node.get("status") or {}).get("allocatable")) or {}
    return quantity_or_zero(alloc.get(name))


@dataclass(frozen=True)
class BoundPod:
    """What the ledger keeps about one bound pod."""

    uid: str
    node: str
    namespace: str
    labels: Mapping[str, str]
    requests: Mapping[str, Fraction] = field(default_factory=dict)


class Ledger:
    """Resources and labels of pods seen bound, per node; thread-safe and bounded.

    At most ``max_pods`` pods are kept (default 100000); recording one more
    forgets the oldest recorded pod first. Recording a pod UID again replaces
    the earlier entry (and makes it the newest).
    """

    def __init__(self, max_pods: int = 100_000) -> None:
        if max_pods < 1:
            raise ValueError("max_pods must be at least 1")
        self.max_pods = max_pods
        self._lock = threading.Lock()
        self._pods: OrderedDict[str, BoundPod] = OrderedDict()
        self._used: dict[str, dict[str, Fraction]] = {}
        self._by_node: dict[str, dict[str, BoundPod]] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)

    def record(self, pod: Mapping[str, Any], node_name: str) -> None:
        """Remember ``pod`` as bound to ``node_name``."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")
        entry = BoundPod(
            uid=uid,
            node=node_name,
            namespace=str(meta.get("namespace") or ""),
            labels=dict(meta.get("labels") or {}),
            requests=pod_requests(pod),
        )
        with self._lock:
            self._remove_locked(uid)
            while len(self._pods) >= self.max_pods:
                oldest = next(iter(self._pods))
                self._remove_locked(oldest)
            self._pods[uid] = entry
            used = self._used.setdefault(node_name, {})
            _add(used, entry.requests)
            self._by_node.setdefault(node_name, {})[uid] = entry

    def forget(self, pod_uid: str) -> None:
        """Forget a pod (deleted, or its binding failed). Unknown UIDs are ignored."""
        with self._lock:
            self._remove_locked(pod_uid)

    def _remove_locked(self, uid: str) -> None:
        entry = self._pods.pop(uid, None)
        if entry is None:
            return
        used = self._used.get(entry.node)
        if used is not None:
            for k, v in entry.requests.items():
                left = used.get(k, _ZERO) - v
                if left > 0:
                    used[k] = left
                else:
                    used.pop(k, None)
            if not used:
                del self._used[entry.node]
        pods = self._by_node.get(entry.node)
        if pods is not None:
            pods.pop(uid, None)
            if not pods:
                del self._by_node[entry.node]

    def used(self, resources: Iterable[str] | None = None) -> dict[str, dict[str, Fraction]]:
        """Snapshot: node -> resource -> amount requested by the recorded pods."""
        wanted = set(resources) if resources is not None else None
        with self._lock:
            if wanted is None:
                return {n: dict(u) for n, u in self._used.items()}
            out: dict[str, dict[str, Fraction]] = {}
            for n, u in self._used.items():
                sel = {k: v for k, v in u.items() if k in wanted}
                if sel:
                    out[n] = sel
            return out

    def pods_by_node(self) -> dict[str, list[BoundPod]]:
        """Snapshot: node -> recorded pods on it."""
        with self._lock:
            return {n: list(p.values()) for n, p in self._by_node.items()}

    def pod_counts(self) -> dict[str, int]:
        """Snapshot: node -> number of recorded pods on it."""
        with self._lock:
            return {n: len(p) for n, p in self._by_node.items()}
