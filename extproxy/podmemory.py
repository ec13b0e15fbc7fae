"""A bounded, thread-safe memory of Pod objects by UID.

Bind requests carry only a pod's name and UID; what the pod asks for (its managed resources,
its requests for a ledger) is known only from the filter or prioritize call that came before.
Least recently seen pods are forgotten first once `size` is reached.

May import: the standard library and extproxy.protocol.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from .protocol import pod_identity


class PodMemory:
    def __init__(self, size: int = 10_000) -> None:
        self._pods: OrderedDict[str, dict] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def remember(self, pod: dict, uid: str | None = None) -> None:
        """``uid``: the pod's as the scheduler reads it from the bytes (protocol.identity_of),
        when the caller has it; else the dict's."""
        uid = pod_identity(pod)[2] if uid is None else uid
        if not uid:
            return
        with self._lock:
            self._pods[uid] = pod
            self._pods.move_to_end(uid)
            while len(self._pods) > self._size:
                self._pods.popitem(last=False)

    def get(self, uid: str) -> dict | None:
        with self._lock:
            return self._pods.get(uid)

    def pop(self, uid: str) -> dict | None:
        with self._lock:
            return self._pods.pop(uid, None)
