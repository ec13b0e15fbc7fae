"""`GET /api/export/signing-key/`: the public key that export manifests are signed with, for an
auditor to pin and check files with (exportproof.py) without the server or a secret."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from .. import exportsigning
from ..roles import Perm
from .permissions import needs_one_of


class SigningKeyView(generics.GenericAPIView):
    """The public key (its id, base64 and PEM). The first call on a new server makes the key."""

    permission_classes = [needs_one_of(Perm.EXPORT_CALLS, Perm.VIEW_AUDIT)]  # whoever may export
    renderer_classes = [JSONRenderer]
    pagination_class = None

    @extend_schema(responses={200: OpenApiResponse(description="alg, key_id, public_key (base64), pem"), 503: None})
    def get(self, request):
        try:
            return Response(exportsigning.published())
        except exportsigning.SigningKeyError as exc:
            return Response({"detail": str(exc)}, status=503)
