"""An https redirect that would loop says why instead.

With EXTPROXY_HTTPS, Django redirects every plain-http request to https. Behind an Ingress that
terminates TLS, the request is https only if uvicorn believed the Ingress's X-Forwarded-Proto,
which it does only for the addresses in FORWARDED_ALLOW_IPS. When the Ingress is not among
them (deploy/ ships a placeholder that trusts no one), every request arrives saying "https" and
is redirected to https again: the browser shows "too many redirects" and the log shows nothing.
This middleware, placed before Django's SecurityMiddleware, answers such a request with a page
that names the address to trust, and logs it once a minute. A request without the header, or
one saying "http", is left to the redirect, which is then right. The probes' paths are exempt
from the redirect, so from this too.
"""
from __future__ import annotations

import logging
import re

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import HttpResponse
from django.utils.decorators import sync_and_async_middleware

from .ratelog import RateLimitedLog

log = RateLimitedLog(logging.getLogger("extproxy.https"), interval=60.0)


def loop_reason(request) -> str | None:
    """Why redirecting this request to https would loop, or None when it would not."""
    if not settings.SECURE_SSL_REDIRECT or request.is_secure():
        return None
    # The last value is the one the nearest proxy set; an earlier one came from further away.
    proto = request.META.get("HTTP_X_FORWARDED_PROTO", "").rpartition(",")[2].strip().lower()
    if proto != "https":
        return None
    path = request.path.lstrip("/")
    if any(re.search(pattern, path) for pattern in settings.SECURE_REDIRECT_EXEMPT):
        return None
    peer = request.META.get("REMOTE_ADDR", "") or "an unknown address"
    return (f"This request came through a proxy at {peer} that says the browser used https, but {peer} is not "
            "in FORWARDED_ALLOW_IPS, so extproxy cannot believe it: redirecting to https would send the "
            "browser here again, for ever. Set FORWARDED_ALLOW_IPS to the Ingress controller's pod addresses "
            "(see the README, Security).")


def _answer(reason: str) -> HttpResponse:
    log.emit(logging.WARNING, "untrusted-https-proxy", "%s", reason)
    return HttpResponse(reason + "\n", status=500, content_type="text/plain; charset=utf-8")


@sync_and_async_middleware
def untrusted_https_proxy_middleware(get_response):
    """Answers the request whose https redirect would loop (loop_reason) instead of redirecting."""
    if iscoroutinefunction(get_response):

        async def middleware(request):
            reason = loop_reason(request)
            return _answer(reason) if reason else await get_response(request)

    else:

        def middleware(request):  # type: ignore[misc]
            reason = loop_reason(request)
            return _answer(reason) if reason else get_response(request)

    return middleware
