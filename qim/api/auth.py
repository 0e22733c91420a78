"""DRF authentication by device token: `Authorization: Token <key>` (protocol.md §3)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from qim.queries.identity import live_token_for


class DeviceTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):  # type: ignore[no-untyped-def]
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization: Token <token>")
        key = header[1].decode(errors="replace")
        token = live_token_for(key)
        if token is None:
            # Unknown, revoked and expired tokens look alike: a token's history is nobody's.
            raise exceptions.AuthenticationFailed("unknown or expired token")
        user = token.device.user
        # Views read the device through request.auth.
        return user, token

    def authenticate_header(self, request):  # type: ignore[no-untyped-def]
        return self.keyword


class DeviceTokenScheme(OpenApiAuthenticationExtension):
    """Tells drf-spectacular how the token travels, so the schema documents it."""

    target_class = "qim.api.auth.DeviceTokenAuthentication"
    name = "DeviceToken"

    def get_security_definition(self, auto_schema):  # type: ignore[no-untyped-def]
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token <token>` from POST /api/v1/auth/token",
        }
