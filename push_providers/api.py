"""Push providers over REST: the VAPID public key browsers subscribe with."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from qim.errors import Refused
from push_providers.credentials import credentials_for


class VapidPublicKeyView(APIView):
    """The applicationServerKey for PushManager.subscribe(): the tenant's VAPID public key, or
    the global one when the tenant has none; any user of the tenant."""

    @extend_schema(responses=inline_serializer("VapidPublicKey", {"public_key": serializers.CharField()}))
    def get(self, request: Request) -> Response:
        vapid = credentials_for(request.user.tenant_id).vapid
        if vapid is None:
            raise Refused("not_found", "Web Push is not configured on this server")
        return Response({"public_key": vapid.public_key_b64url()})
