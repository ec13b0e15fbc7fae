"""/healthz (alive), /readyz (configuration loaded; the spool's and the database's state), /metrics.

`alive` and `ready` take no request: the probe port (probe_port.py) answers with them too, so
that both ports say the same.
"""

from django.http import HttpResponse, JsonResponse

from . import metrics


def healthz(request):
    return alive()


def readyz(request):
    return ready()


def alive() -> HttpResponse:
    return HttpResponse("ok\n", content_type="text/plain")


def ready() -> HttpResponse:
    """Ready while the extender can be served: its configuration is loaded. The database is
    reported (as the recorder process last found it), not judged. Readiness puts a pod in its
    Services, the one kube-scheduler calls included: had a database outage made every replica
    unready at once, scheduling would stop, where serving goes on and the calls wait in the
    spool. Nor does this touch the database: with every pooled connection busy or the database
    away, a probe would wait out the pool's timeout (5 s)."""
    from .engine import get_engine
    from .recording.observe import readiness

    try:
        engine = get_engine()
    except Exception as exc:
        return JsonResponse({"ready": False, "problems": {"config": str(exc)}}, status=503)
    return JsonResponse(
        {"ready": True, "backends": sorted(engine.backends), "config": engine.config.source,
         "recording": readiness(engine.recorder)}
    )


def metrics_view(request):
    return HttpResponse(metrics.render(), content_type="text/plain; version=0.0.4; charset=utf-8")
