"""/healthz (alive), /readyz (database reachable, configuration loaded; the spool's state), /metrics."""
import time

from django.db import connection
from django.http import HttpResponse, JsonResponse

from . import metrics


def healthz(request):
    return HttpResponse("ok\n", content_type="text/plain")


def readyz(request):
    from .engine import get_engine

    problems = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        problems["database"] = str(exc)
    try:
        engine = get_engine()
    except Exception as exc:
        problems["config"] = str(exc)
    if problems:
        return JsonResponse({"ready": False, "problems": problems, "recording": recording_status()}, status=503)
    return JsonResponse(
        {"ready": True, "backends": sorted(engine.backends), "config": engine.config.source, "recording": recording_status()}
    )


def recording_status() -> dict:
    """The spool as on disk: what is not yet in the database, and whether calls are dropped.

    Reported, not judged: the hot path serves whatever the spool's state (README, "How
    recording works"), so a full spool or a stopped recorder does not make this replica unready.
    """
    from .engine import get_engine
    from .recording.spool import read_recorder_counters

    recorder = get_engine().recorder
    status = recorder.status()
    theirs = read_recorder_counters(recorder.spool.root)
    return {
        "spool_depth": status.depth,
        "spool_bytes": status.bytes,
        "oldest_undrained_age_seconds": round(status.oldest_age, 3),
        "spool_full": recorder.spool_full,
        "handoff_depth": recorder.queued,
        "dropped": dict(recorder.drops.counts, **{k: v + recorder.drops.counts.get(k, 0) for k, v in theirs.get("dropped", {}).items()}),
        "recorder_heartbeat_age_seconds": round(time.time() - theirs["updated_at"], 3) if "updated_at" in theirs else None,
    }


def metrics_view(request):
    return HttpResponse(metrics.render(), content_type="text/plain; version=0.0.4; charset=utf-8")
