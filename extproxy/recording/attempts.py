"""Linking one pod's calls into scheduling attempts (filter ... prioritize ... bind).

Owns the in-memory AttemptTracker of the recorder process. Pure and bounded; must not touch
the database. Attempts are linked per recorder, that is per replica.
"""
from __future__ import annotations

import uuid
from collections import OrderedDict
from typing import Any


class AttemptTracker:
    """Groups one pod's calls into scheduling attempts (filter ... prioritize ... bind).

    A filter starts a new attempt when the current one already has a filter from the same
    backend (unless that one was the one-node nominated-node filter), after a bind, or after
    `window` seconds of silence. Other verbs join the current attempt. Bounded: the least
    recently seen pods are forgotten first.
    """

    def __init__(self, max_pods: int = 50_000, window: float = 60.0) -> None:
        self._pods: OrderedDict[str, dict[str, Any]] = OrderedDict()
        # Ids unique across processes and restarts: a random prefix per tracker, then a counter.
        self._prefix = uuid.uuid4().hex[:12]
        self._count = 0
        self._max_pods = max_pods
        self._window = window

    def link(self, pod_uid: str, verb: str, backend: str, node_count: int, at: float) -> str:
        if not pod_uid:
            return ""
        state = self._pods.get(pod_uid)
        if state is None or self._starts_new(state, verb, backend, at):
            self._count += 1
            state = {"id": f"{self._prefix}-{self._count:x}", "filters": {}, "bound": False}
        state["last"] = at
        if verb == "filter":
            state["filters"][backend] = node_count
        if verb == "bind":
            state["bound"] = True
        self._pods[pod_uid] = state
        self._pods.move_to_end(pod_uid)
        while len(self._pods) > self._max_pods:
            self._pods.popitem(last=False)
        return state["id"]

    def _starts_new(self, state: dict[str, Any], verb: str, backend: str, at: float) -> bool:
        if at - state["last"] > self._window or state["bound"]:
            return True
        if verb != "filter" or backend not in state["filters"]:
            return False
        return state["filters"][backend] != 1  # the nominated-node pass is followed by a full one
