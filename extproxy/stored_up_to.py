"""Up to when every call is in the database: the point an export's range must end before to be
complete (`still_open`, the manifest's `still_open`).

Calls not yet stored are in flight in a serving process, waiting to reach its spool, or in the
spool; the stored-up-to point is before all of them. This replica's spool is read from the
disk (`spool_limits`); every other replica's is read from what its recorder last reported to
the database (`other_replicas`; written by spool_reports.py), since its spool is on its own
disk. Gap rows (calls that will never be stored) are gaps.py's.
"""
from __future__ import annotations

import socket
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

from django.utils import timezone

from .timetext import iso_z

SILENT_SECONDS = 60.0  # a report older than this is named as such in the manifest


# With the spool backlogged, the least time allowed between a call's start and its record's
# append (the longest call's own bound, `settle_seconds`, when that is longer).
SETTLE_SECONDS = 60.0


def settle_seconds() -> float:
    """The longest a call can take from its start (the time it is recorded and exported under)
    to its record's append to the spool, from the configured backends' timeouts and the proxy's
    own bounds:

    - per-backend form: the backend's call is given up at its httpTimeout less a margin
      (backends.http.proxy_timeout); a request passed on as it arrives (the extender listener)
      is answered once its last byte is in, at most EXTPROXY_BODY_TIMEOUT after its head;
    - combined form: the combined entry's own timeout (semantics.entry.combined_timeout: the
      filter and preempt chains' sums, the longest prioritizer or binder, plus the proxy's
      own time between answers, COMBINED_TIMEOUT_MARGIN);
    - then the record waits in the aside (aside.RUN_WITHIN) and the hand-off (HANDOFF_TICK).

    Built-in policies answer in the process, without waiting. Not bounded here: the rest of a
    large reply passed on at the pace the scheduler reads it (its own timeout for the entry
    bounds that, and it is not in this configuration). The configuration is read as the
    serving processes read it (EXTPROXY_CONFIG): a file changed since they started is not what
    bounds their calls until they are restarted (a timeout lowered in it makes the bound short)."""
    from django.conf import settings

    from .aside import RUN_WITHIN
    from .config import load_config
    from .recording.handoff import HANDOFF_TICK
    from .semantics.entry import COMBINED_TIMEOUT_MARGIN, combined_timeout

    config = load_config(settings.EXTPROXY_CONFIG or None)
    waited = [b.http_timeout for b in config.backends if not b.is_policy]
    answered = combined_timeout(config.backends, config.parallel_filter)
    if waited:
        answered = max(answered, max(waited) + COMBINED_TIMEOUT_MARGIN,
                       float(settings.EXTPROXY_BODY_TIMEOUT) + COMBINED_TIMEOUT_MARGIN)
    return answered + RUN_WITHIN + HANDOFF_TICK


def serving_now(root: Path) -> bool:
    """Whether a process holds a spool writer directory (a serving process with recording on):
    only there can a call be in flight. A directory without writer.lock was never a writer's.
    Only this spool's writers are seen (one replica's); as every replica has the same
    configuration, the span a call of any replica may still be in flight is the same."""
    from .recording.spool import writer_alive

    if not root.is_dir():
        return False
    return any(d.is_dir() and (d / "writer.lock").exists() and writer_alive(d) for d in root.iterdir())


class Limit(NamedTuple):
    """Every call that started before `point` is stored (None: no such point is known); `reason`
    says why not later."""

    point: datetime | None
    reason: str


def spool_limits(root: Path, bound: float, now: datetime) -> tuple[list[Limit], int]:
    """This spool's limits on what is stored, and the calls waiting in it:
    - while the spool holds calls answered and not yet stored (the recorder behind, the
      database away), the oldest one's append (T) less `bound` (at least SETTLE_SECONDS);
    - while a serving process runs, now less `bound`: a call in flight (its backend slow to
      answer) or answered and not yet in the spool started no earlier;
    - not known, while a serving process's spool directory holds the tally of calls it answered
      and had not spooled when it was killed (recording/unsettled.py, abandoned.py): counted as
      gaps (`killed`) only once claimed again, and their start times are not read here.
    Raises what reading the spool raises."""
    from .recording.abandoned import abandoned
    from .recording.observe import spool_status

    status = spool_status(root)
    limits = []
    if status.depth:
        limits.append(Limit(now - timedelta(seconds=status.oldest_age + max(SETTLE_SECONDS, bound)),
                            "calls not yet stored (spool backlog)"))
    if serving_now(root):
        limits.append(Limit(now - timedelta(seconds=bound),
                            f"calls started in the last {bound:g} s may still be in flight or on their way to "
                            "the spool (the backends' timeouts and the proxy's bounds)"))
    left = abandoned(root)
    if left:
        limits.append(Limit(None, f"a serving process ended without settling its calls (spool directory "
                                  f"{', '.join(sorted(left))}): those it answered and did not spool are not counted "
                                  "yet (the recorder counts them within a minute, or a serving process that claims "
                                  "the directory at once)"))
    return limits, status.depth


def still_open(until: datetime) -> dict[str, Any] | None:
    """Why calls started before `until` may still arrive in the database, or None.

    Every call not yet stored started after the stored-up-to point, the earliest of this
    spool's limits (`spool_limits`), every other replica's as its recorder last reported them
    (`other_replicas`, reported by spool_reports.py: its spool and its calls in flight are on its own disk), and now, for a
    range that ends after now (an `until` in the future): the calls made in it from now on
    cannot be in this export, and a later export of the same range holds more. A range ending
    after the stored-up-to point is still open. Asked before the first record is read: a call
    that is in no spool and no serving process now is in the database.
    """
    from django.conf import settings

    root = Path(settings.EXTPROXY_SPOOL_DIR)
    try:
        bound = settle_seconds()
    except Exception as exc:  # the longest call is not known: any call may still arrive
        return {"reason": f"the configuration could not be read ({type(exc).__name__}): calls may still arrive",
                "undrained": None, "stored_up_to": None}
    now = timezone.now()
    try:
        limits, undrained = spool_limits(root, bound, now)
    except Exception as exc:  # asked after the file was sent: the manifest must still be made
        return {"reason": f"the spool could not be read ({type(exc).__name__}: {exc}): calls may still arrive",
                "undrained": None, "stored_up_to": None}
    others, their_undrained = other_replicas(root, now)
    limits += others
    reasons = []
    if until > now:
        reasons.append(f"the range has not ended (it ends at {iso_z(until)}): calls made in it after the export "
                       "started are not in it")
    reasons += [limit.reason for limit in limits if limit.point is None or until > limit.point]
    if not reasons:
        return None
    points = [limit.point for limit in limits]
    stored_up_to = None if None in points else min([now, *points])
    return {"reason": "; ".join(reasons), "undrained": undrained + their_undrained, "stored_up_to": iso_z(stored_up_to)}


def replica_key(root: Path) -> str:
    """This replica: its host name (the pod's name in a Deployment) and its spool directory (two
    installations on one machine have their own)."""
    return f"{socket.gethostname()}:{root.resolve()}"[:255]


def other_replicas(root: Path, now: datetime) -> tuple[list[Limit], int]:
    """Every other replica's last report as a limit (ended ones left out), and the calls their
    spools held then."""
    from .models import SpoolReport

    mine = replica_key(root)
    limits, undrained = [], 0
    for report in SpoolReport.objects.filter(ended=False).exclude(replica=mine):
        undrained += report.undrained
        age = (now - report.reported_at).total_seconds()
        said = f"replica {report.replica}: its recorder reported {age:.0f} s ago"
        if age > SILENT_SECONDS:
            said += (" and not since (stopped, or unable to reach the database; `manage.py forget_replica` "
                     "if the replica is gone)")
        point = report.stored_up_to
        if point is None:
            limits.append(Limit(None, f"{said} that its stored-up-to point is not known: {report.reason}"))
        else:
            why = f" ({report.reason})" if report.reason else ""
            limits.append(Limit(point, f"{said} that its calls are stored up to {point.isoformat()}{why}"))
    return limits, undrained
