"""The Content-Security-Policy header on every response of the human face.

The policy is the EXTPROXY_CSP setting ("" sends none). A view that set its own header keeps
it. The extender endpoints never pass through here (they bypass Django). Sync and async
capable, so async views get no thread hop on its account.
"""
from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings


class ContentSecurityPolicyMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        self.policy = settings.EXTPROXY_CSP
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self._acall(request)
        return self._add(self.get_response(request))

    async def _acall(self, request):
        return self._add(await self.get_response(request))

    def _add(self, response):
        if self.policy:
            response.headers.setdefault("Content-Security-Policy", self.policy)
        return response
