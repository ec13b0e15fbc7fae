"""What a background process (the recorder, the shadow process) does to stay out of serving's way.

Owns lowering the process's CPU priority (a niceness increment, and SCHED_IDLE where the kernel
allows it: a niced process still gets time slices that delay the serving process's wake-ups on a
shared core; an idle-class one runs only when the core has nothing else to run) and ending the
process when the one that started it ends (`make run` starts both beside uvicorn). Call
`lower_priority` before starting any thread: threads inherit the policy of the thread that
creates them. No Django.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Callable

log = logging.getLogger(__name__)


def lower_priority(name: str, increment: int, idle: bool) -> str:
    """Nice this process by `increment` and, when `idle`, put it under SCHED_IDLE; says what it got.

    Lowering the policy needs no privilege on Linux; where it is refused (some containers) or
    unknown, the process runs on at its niceness, with a warning.
    """
    if increment:
        os.nice(increment)
    if idle:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except (AttributeError, OSError) as exc:
            log.warning("%s: SCHED_IDLE not applied (%s); running at nice %d", name, exc, os.nice(0))
    return f"nice {os.nice(0)}, {'SCHED_IDLE' if policy() == getattr(os, 'SCHED_IDLE', None) else 'SCHED_OTHER'}"


def policy() -> int | None:
    """This process's scheduling policy, None where the platform cannot say."""
    try:
        return os.sched_getscheduler(0)
    except (AttributeError, OSError):
        return None


def watch_parent(name: str, finish: Callable[[], None], stop: threading.Event) -> None:
    """Call `finish` once the parent process has ended (checked twice a second until `stop`)."""
    parent = os.getppid()

    def watch() -> None:
        while not stop.wait(0.5):
            if os.getppid() != parent:
                log.info("%s: parent %d ended", name, parent)
                finish()
                return

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()
