"""rtc/ice-servers over REST (protocol.md §3): TURN credentials for the calling user."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from rtc.serializers import IceServersSerializer
from rtc.turn import get_ice_servers


class IceServersView(APIView):
    """Time-limited TURN credentials (coturn use-auth-secret); any authenticated user."""

    @extend_schema(responses=IceServersSerializer)
    def get(self, request: Request) -> Response:
        answer = get_ice_servers(request.user.tenant.name, request.user.username)
        # Credentials: never cached by a proxy or shared between users.
        return Response(answer, headers={"Cache-Control": "no-store"})
