"""The dashboard's background work in a serving process, started and stopped by the ASGI
lifespan: the Kubernetes watcher of the scheduler's events (when an API is configured). Failing
is logged; serving goes on. The roll-up of call latencies runs in the recorder process
(`manage.py recorder`), which writes the calls it counts; pages catch up on it themselves."""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def start() -> None:
    from . import kubewatch

    try:
        kubewatch.start()
    except Exception:  # an optional view must never stop the extender from serving
        log.exception("dashboard: the scheduler events watcher did not start")


def stop() -> None:
    from . import kubewatch

    kubewatch.stop()
