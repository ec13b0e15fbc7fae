"""The ASGI stack in one expression: extender hot path, websockets, then Django.

A bad configuration file stops start-up here with the field and the reason.
"""
from __future__ import annotations

import asyncio
import gc
import importlib
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "extproxy.settings")
# Before settings are read: this process serves, and on PostgreSQL takes its connections from a
# pool (settings._pool_options). Where settings were read before (tests serving in-process), not.
sys.modules["extproxy"].SERVING_PROCESS = True  # type: ignore[attr-defined]

from django.core.asgi import get_asgi_application  # noqa: E402

django_app = get_asgi_application()

from django.conf import settings  # noqa: E402

from .heap import manage_heap  # noqa: E402

# Before the first megabyte body; the trimmer's thread starts with the lifespan.
heap_trimmer = manage_heap(settings.EXTPROXY_HEAP_KEEP_BYTES, settings.EXTPROXY_HEAP_TRIM_SECONDS)

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from dashboard import background as dashboard_background  # noqa: E402
from dashboard.auth import SUBPROTOCOL, OriginValidator, TokenAuthMiddleware  # noqa: E402
from dashboard.routing import websocket_urlpatterns  # noqa: E402

from . import offload, statement_bound  # noqa: E402
from .aside import aside  # noqa: E402
from .config import ConfigError  # noqa: E402
from .database_down import websocket_outage_guard  # noqa: E402
from .engine import get_engine  # noqa: E402
from .replay.worker import get_worker  # noqa: E402
from .connection_bound import install as bound_connections  # noqa: E402
from .header_bound import install as bound_request_heads  # noqa: E402
from .ui_body_bound import bound_bodies  # noqa: E402
from .views import PREFIX, extender_app, refusal, respond  # noqa: E402

# A request's head is bounded too, in size and time, before any of it reaches an application
# (header_bound.py).
bound_request_heads(lambda: settings.EXTPROXY_MAX_HEADER_BYTES, lambda: settings.EXTPROXY_BODY_TIMEOUT)
# So are the connections open at once (connection_bound.py; the extender listener bounds its own).
bound_connections(lambda: settings.EXTPROXY_MAX_CONNECTIONS)

# Every body bound for Django (pages, admin, API, health) is bounded in size and time before
# Django reads it to a temporary file (ui_body_bound.py).
bounded_django_app = bound_bodies(django_app, lambda: settings.EXTPROXY_MAX_UI_BODY_BYTES,
                                  lambda: settings.EXTPROXY_BODY_TIMEOUT)


async def http_app(scope, receive, send):
    if scope["path"].startswith(PREFIX):
        if settings.EXTPROXY_EXTENDER_PORT:  # served on their own port only (extender_access.py)
            await elsewhere(send)
        else:
            await extender_app(scope, receive, send)
    else:
        await bounded_django_app(scope, receive, send)


async def elsewhere(send) -> None:
    await respond(send, refusal(404, f"the extender endpoints are served on port {settings.EXTPROXY_EXTENDER_PORT} "
                                     "(EXTPROXY_EXTENDER_PORT), not on this one", "wrong-port"))


async def _start_extender_listener():
    """The separate extender port with its protection (TLS, client certificates, the source
    allowlist: extender_access.py), when EXTPROXY_EXTENDER_PORT is set (see listener.py)."""
    from .extender_access import connection_check, extender_ssl_context
    from .listener import start_listener

    if not settings.EXTPROXY_EXTENDER_PORT:
        return None
    return await start_listener(settings.EXTPROXY_EXTENDER_HOST, settings.EXTPROXY_EXTENDER_PORT,
                                ssl=extender_ssl_context(), allow=connection_check())


async def _start_probe_listener():
    """kubelet's own port for /healthz and /readyz, when EXTPROXY_PROBE_PORT is set (probe_port.py):
    on this loop, so that a stuck loop still fails liveness."""
    from .probe_port import start_probe_listener

    if not settings.EXTPROXY_PROBE_PORT:
        return None
    return await start_probe_listener(settings.EXTPROXY_PROBE_HOST, settings.EXTPROXY_PROBE_PORT,
                                      settings.EXTPROXY_PROBE_MAX_CONNECTIONS)


async def lifespan_app(scope, receive, send):
    listener = probes = None
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            statement_bound.install()  # before any page's or loop's first statement
            dashboard_background.start()
            heap_trimmer.start()
            aside.bind(asyncio.get_running_loop())  # calls' bookkeeping waits for a backend wait
            get_engine().recorder.start()  # spool-writer thread, live-event listener
            get_worker().start_watching()  # replay runs: heartbeat, and recovery of a dead process's
            try:
                listener = await _start_extender_listener()
            except (OSError, ValueError) as exc:  # a taken port, a bad certificate or allowlist
                await send({"type": "lifespan.startup.failed", "message": f"extender listener: {exc}"})
                return
            try:  # last: ready once everything it reports on is started
                probes = await _start_probe_listener()
            except OSError as exc:  # a taken port
                await send({"type": "lifespan.startup.failed", "message": f"probe listener: {exc}"})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            dashboard_background.stop()
            get_worker().stop_watching()
            if listener is not None:
                await listener.close()  # no new connections; calls in flight are answered first
            aside.unbind()  # what waits is handed over; later calls (none should come) at once
            engine = get_engine()
            await engine.close()
            offload.lane.stop()
            engine.recorder.stop()  # what is in memory reaches the spool before the process ends
            heap_trimmer.stop()
            if probes is not None:  # last: answering while the rest shuts down
                await probes.close()
            await send({"type": "lifespan.shutdown.complete"})
            return


application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": OriginValidator(
            websocket_outage_guard(AuthMiddlewareStack(TokenAuthMiddleware(URLRouter(websocket_urlpatterns))),
                                   SUBPROTOCOL)
        ),
        "lifespan": lifespan_app,
    }
)

if os.environ.get("EXTPROXY_SKIP_CONFIG_CHECK") != "1":
    from .extender_access import AccessConfigError, allowlist, client_names, extender_ssl_context

    try:
        get_engine()
        allowlist()
        extender_ssl_context()
        client_names()
    except (ConfigError, AccessConfigError) as exc:
        print(f"extproxy: bad configuration: {exc}", file=sys.stderr)
        sys.exit(2)

# The URL configuration imports every view module (Django's, DRF's, the dashboard's): ~25,000
# objects that the first request (a probe of /healthz) would otherwise build after the freeze
# below, and that every full collection would then walk: 8-13 ms each after start-up, against
# 1.2-1.5 ms with them frozen (bench/README.md, "Eleventh pass").
importlib.import_module(settings.ROOT_URLCONF)

# What start-up built (Django, its apps and URLs, the engine: ~115,000 objects) lives as long as
# the process: moved out of the collector's generations, so that a full collection, when
# traffic triggers one, walks only what was made since. With them it took ~32 ms, in the middle
# of whichever scheduler call triggered it. Once per process, at import (not per lifespan).
gc.freeze()
