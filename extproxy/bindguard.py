"""Which pods extproxy may bind through the Kubernetes API, and to which nodes.

Binding through the API uses extproxy's own service account, so a bind request alone must not
be enough: anyone who could reach the extender port could place any pod anywhere. A pod may be
bound only when this process saw it in a filter or prioritize call (identified by UID, with the
same namespace and name), and only to a node that passed: the nodes a filter let through, or
the nodes a prioritize call was given (the scheduler sends prioritize only the feasible ones).
A later call for the same pod (a new scheduling attempt) replaces what the earlier one allowed.

Bounded: at most `max_pods` pods and about `max_names` node names in all, oldest forgotten
first; a forgotten pod cannot be bound through the API (the refusal says why). The node lists
are kept as the caller's own lists, not copied, so remembering costs the hot path no more than
a dictionary insert. Nothing here does I/O.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Sequence


class BindGuard:
    def __init__(self, max_pods: int = 10_000, max_names: int = 500_000) -> None:
        self._allowed: OrderedDict[str, tuple[str, str, Sequence[str]]] = OrderedDict()
        self._names = 0
        self.max_pods = max_pods
        self.max_names = max_names
        self._lock = threading.Lock()

    def allow(self, uid: str, namespace: str, name: str, nodes: Sequence[str]) -> None:
        """Remember that `nodes` passed for this pod in its current attempt."""
        if not uid:
            return
        with self._lock:
            previous = self._allowed.pop(uid, None)
            if previous is not None:
                self._names -= len(previous[2])
            self._allowed[uid] = (namespace, name, nodes)
            self._names += len(nodes)
            while self._allowed and (len(self._allowed) > self.max_pods or self._names > self.max_names):
                _, (_, _, dropped) = self._allowed.popitem(last=False)
                self._names -= len(dropped)

    def refusal(self, uid: str, namespace: str, name: str, node: str) -> str | None:
        """Why this binding must not be made through the API, or None when it may."""
        with self._lock:
            entry = self._allowed.get(uid) if uid else None
        who = f"{namespace}/{name}"
        if entry is None or entry[:2] != (namespace, name):
            return (f"extproxy: refusing to bind pod {who} through the API: not seen in a filter or prioritize "
                    "call of this extproxy process")
        if node not in entry[2]:
            return f"extproxy: refusing to bind pod {who} to node {node} through the API: that node did not pass"
        return None

    def forget(self, uid: str) -> None:
        with self._lock:
            entry = self._allowed.pop(uid, None)
            if entry is not None:
                self._names -= len(entry[2])
