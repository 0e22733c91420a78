"""DRF authentication by device token: `Authorization: Token <key>` (protocol.md §3)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from qim.models import DeviceToken


class DeviceTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):  # type: ignore[no-untyped-def]
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization: Token <token>")
        key = header[1].decode(errors="replace")
        token = (
            DeviceToken.objects.select_related("device__user__tenant").filter(key=key).first()
        )
        if token is None:
            raise exceptions.AuthenticationFailed("unknown token")
        user = token.device.user
        # Views read the device through request.auth.
        return user, token

    def authenticate_header(self, request):  # type: ignore[no-untyped-def]
        return self.keyword


class DeviceTokenScheme(OpenApiAuthenticationExtension):
    """Tells drf-spectacular how the token travels, so the schema documents it."""

    target_class = "qim.api_auth.DeviceTokenAuthentication"
    name = "DeviceToken"

    def get_security_definition(self, auto_schema):  # type: ignore[no-untyped-def]
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token <token>` from POST /api/v1/auth/token",
        }
