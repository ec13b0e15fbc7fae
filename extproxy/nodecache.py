"""A node cache fed by the Kubernetes API (list, then watch), for backends that need full Node
objects when the scheduler sends only names (nodeCacheCapable: true on the proxy's entry).

One daemon thread per process lists the Nodes, then watches from the list's
resourceVersion; when the watch ends, fails or answers 410 Gone, it lists again. Objects are kept as the API's
JSON (camelCase dicts), which is what a backend in full-object mode expects. Readers get
`get_many(names)`; names the cache does not know are reported, never invented.
"""
from __future__ import annotations

import json
import logging
import threading
from typing import Any

from kubernetes import watch

from . import kube

log = logging.getLogger(__name__)


class NodeCache:
    def __init__(self, api_factory=None, relist_backoff: float = 1.0) -> None:
        self._nodes: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._api_factory = api_factory
        self._backoff = relist_backoff
        self.resource_version = ""

    def start(self) -> "NodeCache":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="extproxy-nodecache", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def get_many(self, names: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
        """(the Node objects found, in the order asked; the names not in the cache)."""
        with self._lock:
            found = [self._nodes[n] for n in names if n in self._nodes]
            missing = [n for n in names if n not in self._nodes]
        return found, missing

    def __len__(self) -> int:
        return len(self._nodes)

    def _api(self):
        if self._api_factory is not None:
            return self._api_factory()
        return kube.core_api()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._list()
                self._watch()
            except Exception as exc:  # API down, 410 Gone, bad data: list again after a pause
                log.warning("node cache: %s; listing again in %.1fs", exc, self._backoff)
                self._stop.wait(self._backoff)

    def _list(self) -> None:
        response = self._api().list_node(_preload_content=False)
        data = json.loads(response.data)
        nodes = {item["metadata"]["name"]: item for item in data.get("items") or ()}
        with self._lock:
            self._nodes = nodes
        self.resource_version = (data.get("metadata") or {}).get("resourceVersion", "")
        self._ready.set()

    def _watch(self) -> None:
        watcher = watch.Watch()
        for event in watcher.stream(self._api().list_node, resource_version=self.resource_version, timeout_seconds=300):
            if self._stop.is_set():
                watcher.stop()
                return
            kind, obj = event.get("type"), event.get("raw_object") or {}
            if kind == "ERROR":
                raise RuntimeError(f"watch error: {obj.get('message') or obj}")
            name = (obj.get("metadata") or {}).get("name")
            if not name:
                continue
            with self._lock:
                if kind == "DELETED":
                    self._nodes.pop(name, None)
                else:
                    self._nodes[name] = obj
            self.resource_version = obj["metadata"].get("resourceVersion", self.resource_version)
        # The server ended the watch at its timeout: _run lists again, which also repairs
        # anything a missed event left stale.
