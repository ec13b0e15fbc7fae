"""The scheduler's own words, from the Kubernetes API: FailedScheduling and Scheduled events
(events.k8s.io/v1) and pod bindings (an unassigned pod that gets spec.nodeName), stored as
`SchedulerEvent`s so a pod's page can show them beside the extender decisions, and pending
pods can drop a pod the scheduler bound by itself.

Optional: on when extproxy runs in a pod (in-cluster service account) or KUBECONFIG is set
(`EXTPROXY_KUBE_WATCH=auto`, the default); `on` forces it, `off` disables it. One daemon
thread per watched kind lists, then watches from the list's resourceVersion, and lists again
after the watch ends, fails or answers 410 Gone. Several replicas may watch the same cluster:
each event is stored once (unique key). Stored events older than `EXTPROXY_KUBE_EVENTS_HOURS`
(default 24) are deleted. This module must not touch the call records.
"""
from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable

log = logging.getLogger(__name__)

REASONS = {"FailedScheduling": "FailedScheduling", "Scheduled": "Scheduled"}
ASSIGNED = re.compile(r" to (\S+?)\.?$")  # "Successfully assigned ns/pod to node-1"
PRUNE_EVERY = 600.0
MESSAGE_MAX = 8000  # characters of an event's note kept

_watcher: "SchedulerWatcher | None" = None


def watching() -> bool:
    """True once a watcher has read the API at least once in this process."""
    return _watcher is not None and _watcher.connected.is_set()


def wanted() -> bool:
    mode = os.environ.get("EXTPROXY_KUBE_WATCH", "auto").strip().lower()
    if mode in ("off", "0", "false", "no"):
        return False
    if mode in ("on", "1", "true", "yes"):
        return True
    if mode != "auto":
        raise ValueError(f"EXTPROXY_KUBE_WATCH={mode!r}: expected auto, on or off")
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST") or os.environ.get("KUBECONFIG"))


def start() -> "SchedulerWatcher | None":
    """Start the process's watcher when the API is configured (see the module docstring)."""
    global _watcher
    if _watcher is None and wanted():
        _watcher = SchedulerWatcher().start()
    return _watcher


def stop() -> None:
    global _watcher
    if _watcher is not None:
        _watcher.stop()
        _watcher = None


def _when(*values: Any) -> datetime:
    for value in values:
        if isinstance(value, str) and value:
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
    return datetime.now(timezone.utc)


def event_row(obj: dict) -> dict | None:
    """A SchedulerEvent's fields for an events.k8s.io/v1 Event, or None when it is not one of ours."""
    reason = obj.get("reason")
    regarding = obj.get("regarding") or {}
    if reason not in REASONS or regarding.get("kind", "Pod") != "Pod" or not regarding.get("name"):
        return None
    meta = obj.get("metadata") or {}
    series = obj.get("series") or {}
    note = str(obj.get("note") or "")
    node = ""
    if reason == "Scheduled":
        found = ASSIGNED.search(note)
        node = found.group(1) if found else ""
    count = series.get("count") or obj.get("deprecatedCount") or 1
    return {
        # A repeated event is one object with a growing series count: each repeat is a row.
        "key": f"{meta.get('uid') or meta.get('name')}/{count}"[:200],
        "kind": REASONS[reason],
        "pod_namespace": str(regarding.get("namespace") or meta.get("namespace") or "")[:253],
        "pod_name": str(regarding["name"])[:253],
        "pod_uid": str(regarding.get("uid") or "")[:64],
        "node": node[:253],
        "message": note,  # redacted and cut to MESSAGE_MAX when stored
        "reporter": str(obj.get("reportingController") or "")[:253],
        "at": _when(series.get("lastObservedTime"), obj.get("eventTime"), obj.get("deprecatedLastTimestamp"),
                    meta.get("creationTimestamp")),
    }


def binding_row(obj: dict) -> dict | None:
    """A "Bound" SchedulerEvent for a pod that now has spec.nodeName, whoever bound it."""
    node = (obj.get("spec") or {}).get("nodeName")
    meta = obj.get("metadata") or {}
    if not node or not meta.get("name"):
        return None
    scheduled: dict[str, Any] = next((c for c in (obj.get("status") or {}).get("conditions") or ()
                      if c.get("type") == "PodScheduled" and c.get("status") == "True"), {})
    return {
        "key": f"bound/{meta.get('uid') or meta.get('namespace', '') + '/' + meta['name']}/{node}"[:200],
        "kind": "Bound",
        "pod_namespace": str(meta.get("namespace") or "")[:253],
        "pod_name": str(meta["name"])[:253],
        "pod_uid": str(meta.get("uid") or "")[:64],
        "node": str(node)[:253],
        "message": f"spec.nodeName is {node}",
        "reporter": "",
        "at": _when(scheduled.get("lastTransitionTime")),
    }


def store(rows: Iterable[dict]) -> int:
    from django.db import close_old_connections

    from extproxy.engine import get_engine
    from extproxy.recording.bulk import make_storable
    from extproxy.redaction import bounded_text

    from .models import SchedulerEvent

    # A FailedScheduling note quotes the extenders' reasons and errors, which can echo what the
    # Pod holds: redacted by the rules the recorder uses for them.
    rules = get_engine().config.redaction
    # Made storable: a note or a name with NUL failed the whole list on PostgreSQL, again at each
    # retry, and no scheduler event was stored while that one lived.
    objects = [make_storable(SchedulerEvent(**dict(row, message=bounded_text(row["message"], rules, MESSAGE_MAX))))
               for row in rows]
    if not objects:
        return 0
    close_old_connections()
    SchedulerEvent.objects.bulk_create(objects, ignore_conflicts=True, batch_size=500)
    return len(objects)


def prune(hours: float | None = None) -> int:
    from .models import SchedulerEvent

    hours = float(os.environ.get("EXTPROXY_KUBE_EVENTS_HOURS", "24")) if hours is None else hours
    deleted, _ = SchedulerEvent.objects.filter(at__lt=datetime.now(timezone.utc) - timedelta(hours=hours)).delete()
    return deleted


class _Follower:
    """List, then watch from the list's resourceVersion; again after any end or failure."""

    def __init__(self, name: str, list_call: Callable[..., Any], to_row: Callable[[dict], dict | None],
                 watcher: "SchedulerWatcher", rows_from_list: bool = True, **selectors: Any) -> None:
        self.name, self.list_call, self.to_row = name, list_call, to_row
        self.watcher, self.rows_from_list, self.selectors = watcher, rows_from_list, selectors
        self.resource_version = ""

    def run(self) -> None:
        backoff = self.watcher.backoff
        last_complaint = 0.0
        while not self.watcher.stopping.is_set():
            try:
                self._list()
                self.watcher.connected.set()
                backoff = self.watcher.backoff
                self._watch()
            except Exception as exc:  # API down, 410 Gone, RBAC: list again after a pause
                if time.monotonic() - last_complaint > 60:
                    last_complaint = time.monotonic()
                    log.warning("scheduler events (%s): %s; trying again in %.1fs", self.name, exc, backoff)
                self.watcher.stopping.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def _list(self) -> None:
        response = self.list_call(_preload_content=False, **self.selectors)
        data = json.loads(response.data)
        if self.rows_from_list:
            store(r for r in map(self.to_row, data.get("items") or ()) if r)
        self.resource_version = (data.get("metadata") or {}).get("resourceVersion", "")

    def _watch(self) -> None:
        from kubernetes import watch

        stream = watch.Watch()
        for event in stream.stream(self.list_call, resource_version=self.resource_version, timeout_seconds=300,
                                   deserialize=False, **self.selectors):
            if self.watcher.stopping.is_set():
                stream.stop()
                return
            kind, obj = event.get("type"), event.get("raw_object") or event.get("object") or {}
            if kind == "ERROR":
                raise RuntimeError(f"watch error: {obj.get('message') or obj}")
            row = self.to_row(obj) if kind in ("ADDED", "MODIFIED", "DELETED") else None
            if row:
                store([row])
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                self.resource_version = version
            self.watcher.maybe_prune()


class SchedulerWatcher:
    def __init__(self, api_client_factory: Callable[[], Any] | None = None, backoff: float = 1.0) -> None:
        self.api_client_factory = api_client_factory
        self.backoff = backoff
        self.stopping = threading.Event()
        self.connected = threading.Event()
        self.threads: list[threading.Thread] = []
        self._next_prune = 0.0

    def _apis(self) -> tuple[Any, Any]:
        from kubernetes import client

        from extproxy.kube import core_api

        if self.api_client_factory is not None:
            api_client = self.api_client_factory()
            return client.EventsV1Api(api_client), client.CoreV1Api(api_client)
        core = core_api()  # in-cluster or KUBECONFIG, configured once for the process
        return client.EventsV1Api(core.api_client), core

    def start(self) -> "SchedulerWatcher":
        threading.Thread(target=self._start, name="extproxy-kubewatch", daemon=True).start()
        return self

    def _start(self) -> None:
        while not self.stopping.is_set():
            try:
                events, core = self._apis()
                break
            except Exception as exc:
                log.warning("scheduler events: no Kubernetes API: %s", exc)
                if self.stopping.wait(30):
                    return
        followers = [
            _Follower("events", events.list_event_for_all_namespaces, event_row, self),
            # Unassigned pods only: a bound pod leaves the selection, and the watch reports it
            # (as DELETED, with its new spec.nodeName).
            _Follower("bindings", core.list_pod_for_all_namespaces, binding_row, self, rows_from_list=False,
                      field_selector="spec.nodeName="),
        ]
        for follower in followers:
            thread = threading.Thread(target=follower.run, name=f"extproxy-kubewatch-{follower.name}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def maybe_prune(self) -> None:
        if time.monotonic() >= self._next_prune:
            self._next_prune = time.monotonic() + PRUNE_EVERY
            try:
                prune()
            except Exception:  # pruning is retried later; watching goes on
                log.exception("scheduler events: pruning failed")

    def stop(self) -> None:
        self.stopping.set()
