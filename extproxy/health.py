"""/healthz (alive), /readyz (database reachable, configuration loaded; the spool's state), /metrics."""

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
    from .engine import get_engine
    from .recording.observe import readiness

    return readiness(get_engine().recorder)


def metrics_view(request):
    return HttpResponse(metrics.render(), content_type="text/plain; version=0.0.4; charset=utf-8")
