"""The dashboard's background work in a serving process, started and stopped by the ASGI
lifespan: the Kubernetes watcher of the scheduler's events (when an API is configured) and the
roll-up of call latencies for the backends page. Each one failing is logged; serving goes on."""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def start() -> None:
    from . import kubewatch, rollup

    for name, begin in (("scheduler events watcher", kubewatch.start), ("latency roll-up", rollup.start)):
        try:
            begin()
        except Exception:  # an optional view must never stop the extender from serving
            log.exception("dashboard: the %s did not start", name)


def stop() -> None:
    from . import kubewatch, rollup

    kubewatch.stop()
    rollup.stop()
