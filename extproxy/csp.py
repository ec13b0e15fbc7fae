"""The Content-Security-Policy header on every response of the human face.

The policy is the EXTPROXY_CSP setting ("" sends none). A view that set its own header keeps
it. The extender endpoints never pass through here (they bypass Django). Sync and async
capable, so async views get no thread hop on its account.
"""
from __future__ import annotations

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.utils.decorators import sync_and_async_middleware


@sync_and_async_middleware
def content_security_policy_middleware(get_response):
    policy = settings.EXTPROXY_CSP

    def add(response):
        if policy:
            response.headers.setdefault("Content-Security-Policy", policy)
        return response

    if iscoroutinefunction(get_response):

        async def middleware(request):
            return add(await get_response(request))

    else:

        def middleware(request):  # type: ignore[misc]
            return add(get_response(request))

    return middleware
