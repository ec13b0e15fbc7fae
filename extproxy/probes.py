"""/healthz, /readyz and /metrics answered whatever the request's Host.

Kubelet probes and Prometheus scrapes reach a pod at its own address, so their Host is
`<pod IP>:<port>`, which EXTPROXY_ALLOWED_HOSTS cannot list (pod addresses change with every
restart); Django's host check answered them 400, and Prometheus saw the target down. These
three answers build no URL from the Host and set no cookie, so the check protects nothing there.
Placed first in MIDDLEWARE: the host is read (and refused) by the middleware after it.
"""
from __future__ import annotations

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.utils.decorators import sync_and_async_middleware

from . import health

VIEWS = {"/healthz": health.healthz, "/readyz": health.readyz, "/metrics": health.metrics_view}


@sync_and_async_middleware
def probe_paths_middleware(get_response):
    """Serves VIEWS' paths (GET and HEAD) itself; every other request goes on down the chain."""
    if iscoroutinefunction(get_response):

        async def middleware(request):
            view = VIEWS.get(request.path) if request.method in ("GET", "HEAD") else None
            return await sync_to_async(view)(request) if view else await get_response(request)

    else:

        def middleware(request):  # type: ignore[misc]
            view = VIEWS.get(request.path) if request.method in ("GET", "HEAD") else None
            return view(request) if view else get_response(request)

    return middleware
